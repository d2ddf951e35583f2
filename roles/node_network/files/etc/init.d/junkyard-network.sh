#!/sbin/openrc-run
# shellcheck shell=sh
# junkyard.cluster: set the host name from the node identity and bring up the
# data interface of this node.  One image serves every node: the identity
# (junkyard.node=<name> on the kernel command line) picks the node's line in
# /etc/junkyard/datanet.conf ("node mac address/prefix mtu") and the MAC picks
# the interface.  The management interface (kernel ip=, root file system) is
# never touched: an interface with the BOOTIF MAC is refused.

# openrc-run reads description.
# shellcheck disable=SC2034
description="Host name from the node identity, data interface by MAC"
table=/etc/junkyard/datanet.conf

depend() {
	provide net
	after hostname.sh udev kmod
	# rpc.statd talks to rpcbind over the loopback interface
	before rpcbind nfs-common
}

cmdline_value() { # key
	read -r args </proc/cmdline
	set -f
	for arg in $args; do
		case "$arg" in
		"$1"=*) echo "${arg#"$1"=}" ;;
		esac
	done
}

find_iface() { # mac
	for dev in /sys/class/net/*; do
		[ "$(cat "$dev/address" 2>/dev/null)" = "$1" ] && { basename "$dev"; return 0; }
	done
	return 1
}

data_line() { # node -> sets mac, address, mtu
	while read -r name mac address mtu; do
		[ "$name" = "$1" ] && return 0
	done <"$table"
	return 1
}

start() {
	# nothing else brings up the loopback interface (no ifupdown in the image)
	ebegin "Bringing up the loopback interface"
	ip link set dev lo up
	eend $? || return 1
	node=$(cmdline_value junkyard.node)
	if [ -z "$node" ]; then
		eerror "no junkyard.node=<name> on the kernel command line: cannot tell which node this is"
		return 1
	fi
	ebegin "Setting the host name to $node"
	hostname "$node"
	eend $?

	if ! data_line "$node"; then
		eerror "node $node has no data interface in $table"
		return 1
	fi
	bootif=$(cmdline_value BOOTIF | sed 's/^01-//; s/-/:/g')
	if [ "$mac" = "$bootif" ]; then
		eerror "the data MAC $mac is the management interface (BOOTIF): refusing to touch it"
		return 1
	fi
	if ! dev=$(find_iface "$mac"); then
		eerror "no interface has the data MAC $mac of node $node"
		return 1
	fi
	ebegin "Configuring the data interface $dev ($mac) as $address, MTU $mtu"
	ip link set dev "$dev" mtu "$mtu" up && ip address replace "$address" dev "$dev"
	eend $?
}

stop() {
	node=$(cmdline_value junkyard.node)
	data_line "$node" || return 0
	dev=$(find_iface "$mac") || return 0
	ebegin "Removing $address from the data interface $dev"
	ip address del "$address" dev "$dev"
	eend 0
}
