#!/bin/sh
# junkyard.cluster node image: inside a chroot (the image build on the storage
# head) package scripts must not start services; on a booted node they may.
# Exit 101 = action forbidden (invoke-rc.d(8)).
root_id=$(stat -c %d:%i / 2>/dev/null)
init_root_id=$(stat -c %d:%i /proc/1/root/. 2>/dev/null)
if [ -z "$init_root_id" ] || [ "$root_id" != "$init_root_id" ]; then
	exit 101
fi
exit 0
