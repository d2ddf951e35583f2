#!/bin/sh
# Runs inside the privileged harness container (see test_writable.py):
# builds a fake read-only image root, runs the initramfs writable-path script
# against it the way initramfs-tools would (busybox sh, klibc's mount and
# nfsmount first on PATH, busybox applets after), then reports what is
# mounted and what the script left behind.
#
#   harness.sh '<kernel command line>' [panics before the panic stub exits]
set -u
cmdline=$1
max_panics=${2:-1}
fake=/fake
root=$fake/root

mkdir -p "$root" "$fake/run" "$fake/bb"
busybox --install -s "$fake/bb"

# The image: what the writable paths hide or overlay, then read-only.
mount -t tmpfs image "$root"
mkdir -p "$root/var/log" "$root/var/lib/dhcp" "$root/var/lib/nfs" "$root/var/lib/rasdaemon" "$root/var/tmp" \
	"$root/var/lib/ssh-host-keys" "$root/var/lib/prometheus/node-exporter" "$root/var/lib/sudo" \
	"$root/tmp" "$root/etc/ssh" "$root/srv"
chmod 1777 "$root/tmp"
chmod 0750 "$root/var/log"
chown 0:4 "$root/var/log"
echo image-log >"$root/var/log/from-image"
echo image-key >"$root/etc/ssh/ssh_host_ed25519_key"
echo image-config >"$root/etc/ssh/sshd_config"
mount -o remount,ro "$root"

mount -t tmpfs run "$fake/run"
echo "$cmdline" >"$fake/cmdline"
: >"$fake/kmsg"
cat >"$fake/functions" <<FUNCS
panics=0
panic() {
	echo "PANIC: \$*"
	panics=\$((panics + 1))
	echo "\$*" >>$fake/panics
	[ "\$panics" -ge $max_panics ] && exit 77
	return 0
}
FUNCS

echo "--- script"
env rootmnt="$root" JUNKYARD_FUNCTIONS="$fake/functions" JUNKYARD_CONF=/case/writable.conf \
	JUNKYARD_CMDLINE="$fake/cmdline" JUNKYARD_RUN="$fake/run" JUNKYARD_KMSG="$fake/kmsg" \
	PATH="/usr/lib/klibc/bin:$fake/bb:/usr/sbin:/usr/bin:/sbin:/bin" \
	busybox sh /scripts/junkyard-writable 2>&1
echo "--- rc $?"
echo "--- mounts"
awk '$2 ~ "^/fake/(root|run)/" {print $2, $3, $4}' /proc/self/mounts
echo "--- files"
for f in "$fake"/run/junkyard-writable/mounted "$fake"/run/junkyard-writable/degraded \
	"$fake"/run/junkyard-writable/node "$fake"/kmsg "$fake"/panics; do
	[ -f "$f" ] && sed "s|^|${f#"$fake"/}: |" "$f"
done
echo "--- probes"
stat -c 'mode %n %a %u:%g' "$root/tmp" "$root/var/log" "$root/var/lib/dhcp" 2>&1
if echo node-write >"$root/etc/ssh/node-file" 2>/dev/null; then echo "write etc/ssh ok"; else echo "write etc/ssh refused"; fi
if echo node-write >"$root/var/log/node-file" 2>/dev/null; then echo "write var/log ok"; else echo "write var/log refused"; fi
if echo node-write >"$root/srv/node-file" 2>/dev/null; then echo "write srv ok"; else echo "write srv refused"; fi
echo "etc/ssh key: $(cat "$root/etc/ssh/ssh_host_ed25519_key" 2>&1)"
echo "var/log from-image: $(cat "$root/var/log/from-image" 2>&1)"
echo "--- end"
