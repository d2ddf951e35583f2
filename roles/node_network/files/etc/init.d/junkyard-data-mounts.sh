#!/sbin/openrc-run
# shellcheck shell=sh
# junkyard.cluster: mount the science data from the storage head over the
# data network (/etc/junkyard/data.fstab), after the data interface is up.
# The mounts use bg and nofail: an unreachable data server never holds up the
# boot, and the root file system (management network) never depends on them.

# openrc-run reads description.
# shellcheck disable=SC2034
description="Science data over NFS on the data network"
table=/etc/junkyard/data.fstab

depend() {
	need junkyard-network
	after rpcbind
}

start() {
	ebegin "Mounting the science data ($table)"
	mount -a -t nfs -T "$table"
	eend $?
}

stop() {
	ebegin "Unmounting the science data"
	grep -v '^[[:space:]]*#' "$table" | while read -r _ path _; do
		[ -n "$path" ] && mountpoint -q "$path" && umount -l "$path"
	done
	eend 0
}
