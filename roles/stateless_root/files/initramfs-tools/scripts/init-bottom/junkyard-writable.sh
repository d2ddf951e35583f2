#!/bin/sh
# junkyard.cluster: mount the node's writable paths over the read-only root
# before switch_root, so nothing the init system writes is lost.
#
# Reads the table /conf/junkyard-writable.conf (rendered for every node by
# the stateless_root role; format in plugins/filter/image.py) and the node
# identity junkyard.node=<name> from the kernel command line:
#   persistent  NFS mount of the node's own dataset (klibc nfsmount, v2/v3),
#               then a remount with the table's mount flags (nosuid, nodev,
#               noexec), which nfsmount does not take
#   tmpfs       an empty tmpfs with the image directory's mode and owner
#   overlay     tmpfs upper + work directory over the read-only image directory
# A persistent mount that fails follows the table's policy:
#   stop   say why on the console and drop to the panic shell; leaving the
#          shell retries the mount (panic=<s> on the command line reboots)
#   tmpfs  mount a tmpfs instead, say so on the console and record the path in
#          /run/junkyard-writable/degraded (the junkyard-writable OpenRC
#          service logs it again once the system is up)
# Paths under /run are mounted under the initramfs's /run, which init moves
# onto the real root after this script.
#
# The JUNKYARD_* variables exist for the test harness (tests/initramfs/);
# in an initramfs they are unset and the defaults apply.

PREREQ=""
prereqs() { echo "$PREREQ"; }
case "$1" in
prereqs)
	prereqs
	exit 0
	;;
esac

# panic(), log_*_msg() and ${rootmnt} come from initramfs-tools.
# shellcheck source=/dev/null
. "${JUNKYARD_FUNCTIONS:-/scripts/functions}"

conf=${JUNKYARD_CONF:-/conf/junkyard-writable.conf}
cmdline=${JUNKYARD_CMDLINE:-/proc/cmdline}
run=${JUNKYARD_RUN:-/run}
kmsg=${JUNKYARD_KMSG:-/dev/kmsg}
state=$run/junkyard-writable
root=${rootmnt:?rootmnt is not set}

say() {
	echo "junkyard-writable: $*"
	if [ -w "$kmsg" ]; then
		echo "<2>junkyard-writable: $*" >>"$kmsg" 2>/dev/null || true
	fi
}

# Fields of the table lines that apply to everyone: policy, attempts, timeout.
policy=stop
attempts=3
timeout=60
known=""
while read -r key value _; do
	case "$key" in
	policy) policy=$value ;;
	attempts) attempts=$value ;;
	timeout) timeout=$value ;;
	node) known="$known $value" ;;
	esac
done <"$conf"

node=""
read -r args <"$cmdline" || true
set -f
for arg in $args; do
	case "$arg" in
	junkyard.node=*) node=${arg#junkyard.node=} ;;
	esac
done

mkdir -p "$state"
: >"$state/mounted"
: >"$state/degraded"
echo "$node" >"$state/node"

identity_problem=""
if [ -z "$node" ]; then
	identity_problem="the kernel command line has no junkyard.node=<name>"
else
	case " $known " in
	*" $node "*) ;;
	*) identity_problem="node $node is not in $conf (it knows:$known); was the initramfs built after the node was added?" ;;
	esac
fi

target_of() {
	case "$1" in
	/run | /run/*) echo "$run${1#/run}" ;;
	*) echo "$root$1" ;;
	esac
}

mount_tmpfs() { # path target size
	_opts=$(stat -c 'mode=%a,uid=%u,gid=%g' "$2") || return 1
	[ "$3" = "-" ] || _opts="$_opts,$3"
	mount -t tmpfs -o "nodev,nosuid,$_opts" tmpfs "$2"
}

overlay_ready=""
mount_overlay() { # path target name
	if [ -z "$overlay_ready" ]; then
		mkdir -p "$state/overlay" &&
			mount -t tmpfs -o mode=0755 junkyard-overlay "$state/overlay" || return 1
		modprobe -q overlay 2>/dev/null || true
		overlay_ready=1
	fi
	mkdir -p "$state/overlay/$3/upper" "$state/overlay/$3/work" || return 1
	mount -t overlay -o "lowerdir=$2,upperdir=$state/overlay/$3/upper,workdir=$state/overlay/$3/work" \
		overlay "$2"
}

nfs_try() { # source target options
	if command -v timeout >/dev/null 2>&1; then
		timeout "$timeout" nfsmount -o "nolock,$3" "$1" "$2"
	else
		nfsmount -o "nolock,$3" "$1" "$2"
	fi
}

# Options of a persistent line: NFS options for nfsmount in nfs_part, mount
# flags for the remount in flag_part.
split_opts() { # options
	nfs_part=""
	flag_part=""
	_ifs=$IFS
	IFS=,
	for _o in $1; do
		case "$_o" in
		nosuid | nodev | noexec) flag_part="$flag_part,$_o" ;;
		*) nfs_part="$nfs_part,$_o" ;;
		esac
	done
	IFS=$_ifs
	nfs_part=${nfs_part#,}
	flag_part=${flag_part#,}
}

mount_persistent() { # source target options
	_n=1
	while :; do
		if nfs_try "$1" "$2" "$3"; then
			return 0
		fi
		[ "$_n" -ge "$attempts" ] && return 1
		_n=$((_n + 1))
		sleep 2
	done
}

source_of() { # path -> "source options" of this node's persistent line
	while read -r who kind p src opts; do
		if [ "$who" = "$node" ] && [ "$kind" = persistent ] && [ "$p" = "$1" ]; then
			echo "$src $opts"
			return 0
		fi
	done <"$conf"
	return 1
}

# A persistent path that cannot be mounted: stop, or fall back to tmpfs.
persistent_failed() { # path target why
	if [ "$policy" = tmpfs ]; then
		say "WARNING: $3"
		say "WARNING: $1 falls back to an empty tmpfs: what is written there is lost at reboot"
		if mount_tmpfs "$1" "$2" -; then
			echo "$1 $3" >>"$state/degraded"
			note "$1" tmpfs-fallback
			degraded_list="$degraded_list $1"
			return 0
		fi
		say "cannot mount the fallback tmpfs on $1 either"
	fi
	say "FATAL: $3"
	say "FATAL: $1 must be persistent (policy $policy); refusing to boot with it lost."
	say "Fix the export on the storage head, then leave this shell (exit) to retry."
	return 1
}

note() { # "path kind [source]": record a mount
	echo "$*" >>"$state/mounted"
	mounted_list="$mounted_list ${1}(${2})"
}

failed=0
mounted_list=""
degraded_list=""
while read -r who kind path name opts; do
	[ "$who" = "*" ] || continue
	target=$(target_of "$path")
	case "$path" in
	/run/*) mkdir -p "$target" ;;
	esac
	if [ ! -d "$target" ]; then
		say "FATAL: $path does not exist in the image (mount point $target); rebuild the image"
		panic "junkyard-writable: $path is missing from the image"
		failed=1
		continue
	fi
	case "$kind" in
	tmpfs)
		if mount_tmpfs "$path" "$target" "$opts"; then
			note "$path" tmpfs
		else
			say "FATAL: cannot mount a tmpfs on $path"
			panic "junkyard-writable: cannot mount a tmpfs on $path"
			failed=1
		fi
		;;
	overlay)
		if mount_overlay "$path" "$target" "$name"; then
			note "$path" overlay
		else
			say "FATAL: cannot mount the overlay on $path"
			panic "junkyard-writable: cannot mount the overlay on $path"
			failed=1
		fi
		;;
	persistent)
		while :; do
			if [ -n "$identity_problem" ]; then
				why="$identity_problem, so $path has no persistent source"
			elif ! line=$(source_of "$path"); then
				why="node $node has no persistent source for $path in $conf"
			else
				src=${line% *}
				split_opts "${line#* }"
				if mount_persistent "$src" "$target" "$nfs_part"; then
					if [ -n "$flag_part" ] &&
						! mount -t nfs -o "remount,$flag_part" "$src" "$target"; then
						say "WARNING: $path is mounted without $flag_part (the remount failed)"
					fi
					note "$path" persistent "$src"
					break
				fi
				why="cannot mount $src on $path (NFS, $attempts attempts, ${timeout}s each)"
			fi
			persistent_failed "$path" "$target" "$why" && break
			panic "junkyard-writable: $why"
			# Back from the panic shell: try again.
		done
		;;
	*)
		say "FATAL: unknown kind $kind for $path in $conf"
		panic "junkyard-writable: unknown kind $kind for $path"
		failed=1
		;;
	esac
done <"$conf"

if [ -n "$degraded_list" ]; then
	say "WARNING: node ${node:-?} boots with tmpfs in place of:$degraded_list"
fi
say "node ${node:-?} mounted:$mounted_list"
exit "$failed"
