#!/bin/sh
# DHCP, TFTP and HTTP client of the netboot scenario, run in a throw-away
# container on one of the scenario's networks (busybox udhcpc, tftp, wget).
#   client.sh dhcp [udhcpc -x options...]   prints the lease as key=value lines
#                                           (exit 1: no answer)
#   client.sh get SERVER PATH               prints the sha256 of the file
#   client.sh put SERVER PATH               tries to write a file
#   client.sh http SERVER PATH              prints the sha256 of the file (HTTP GET)
#   client.sh http-post SERVER PATH         tries to send a file (HTTP POST)
set -u
mode=$1
shift
case "$mode" in
  dhcp)
    # udhcpc calls this script again with "bound" and the lease in its env
    cat >/tmp/lease <<'SCRIPT'
#!/bin/sh
[ "$1" = bound ] || exit 0
for key in ip subnet hostname domain boot_file siaddr serverid router dns; do
  eval "value=\${$key-}"
  [ -n "$value" ] && echo "$key=$value"
done
exit 0
SCRIPT
    chmod 0755 /tmp/lease
    opts=""
    for opt in "$@"; do opts="$opts -x $opt"; done
    # shellcheck disable=SC2086  # one word per option
    exec busybox udhcpc -i eth0 -f -q -n -t 3 -T 2 -s /tmp/lease $opts
    ;;
  get)
    timeout 15 busybox tftp -g -r "$2" -l /tmp/file "$1" || exit 1
    sha256sum /tmp/file | cut -d' ' -f1
    ;;
  put)
    echo junk >/tmp/junk
    exec timeout 15 busybox tftp -p -l /tmp/junk -r "$2" "$1"
    ;;
  # (busybox 1.35's wget crashes with -T: timeout bounds it instead)
  http)
    timeout 15 busybox wget -q -O /tmp/file "http://$1/$2" || exit 1
    sha256sum /tmp/file | cut -d' ' -f1
    ;;
  http-post)
    exec timeout 15 busybox wget -q -O /dev/null --post-data=junk "http://$1/$2"
    ;;
  *)
    echo "usage: $0 dhcp|get|put|http|http-post ..." >&2
    exit 2
    ;;
esac
