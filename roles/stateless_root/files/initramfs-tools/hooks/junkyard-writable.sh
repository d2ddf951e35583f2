#!/bin/sh
# junkyard.cluster: put what the writable-path script needs into the
# initramfs: the table of every node's writable paths, the overlay module,
# the modules the root needs (/etc/junkyard/initramfs-modules) and busybox's
# stat and timeout (klibc provides mount and nfsmount).
PREREQ=""
prereqs() { echo "$PREREQ"; }
case "$1" in
prereqs)
	prereqs
	exit 0
	;;
esac

# shellcheck source=/dev/null
. /usr/share/initramfs-tools/hook-functions

table=/etc/junkyard/writable.conf
if [ ! -r "$table" ]; then
	echo "E: junkyard-writable: $table is missing; run the stateless_root role" >&2
	exit 1
fi
mkdir -p "${DESTDIR:?}/conf"
cp "$table" "$DESTDIR/conf/junkyard-writable.conf"

manual_add_modules overlay
# the management NIC's drivers and the NFS client (the role's list; with
# MODULES=list nothing else is added)
list=/etc/junkyard/initramfs-modules
if [ -r "$list" ]; then
	# shellcheck disable=SC2046  # one word per module name
	manual_add_modules $(sed -e 's/#.*//' "$list")
fi
if ! command -v busybox >/dev/null 2>&1; then
	echo "E: junkyard-writable: busybox is not installed (stat, timeout are needed)" >&2
	exit 1
fi
