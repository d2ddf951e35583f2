# Parse a DIMM label file with the parser of the installed ras-mc-ctl itself
# (its parse_dimm_labels_file, taken from /usr/sbin/ras-mc-ctl) and print what
# it understood as JSON.  It dies on what ras-mc-ctl would refuse.
use strict;
use warnings;
use JSON::PP;

sub log_error { die "ras-mc-ctl: ", @_ }

my $src = do { local $/; open my $f, "<", "/usr/sbin/ras-mc-ctl" or die "$!\n"; <$f> };
$src =~ /^(sub parse_dimm_labels_file\s*\{.*?^\})/ms
    or die "no parse_dimm_labels_file in /usr/sbin/ras-mc-ctl\n";
eval "no strict; no warnings; $1; 1" or die $@;
my (%model, %layers, %product, %product_layers);
parse_dimm_labels_file(\%model, \%layers, \%product, \%product_layers, $ARGV[0]);
print JSON::PP->new->canonical->encode({model => \%model, product => \%product,
                                        layers => \%layers}), "\n";
