#!/sbin/openrc-run
# shellcheck shell=sh
# junkyard.cluster: report, once the system (and syslog) is up, what the
# initramfs could not mount as configured (/run/junkyard-writable/, written by
# the init-bottom script junkyard-writable).  Nothing is changed here.

# openrc-run reads description.
# shellcheck disable=SC2034
description="Report writable paths that fell back to tmpfs at boot"
state=/run/junkyard-writable

depend() {
	after logger
	use logger
}

start() {
	ebegin "Checking the writable paths"
	if [ ! -f "$state/mounted" ]; then
		ewarn "no record from the initramfs in $state: were the writable paths mounted at all?"
		logger -p daemon.warning -t junkyard-writable \
			"no record from the initramfs in $state; the writable paths may be missing"
		eend 0
		return 0
	fi
	if [ -s "$state/degraded" ]; then
		while read -r path why; do
			ewarn "$path is an empty tmpfs, not persistent: $why"
			logger -p daemon.warning -t junkyard-writable \
				"$path is an empty tmpfs instead of its persistent dataset (lost at reboot): $why"
		done <"$state/degraded"
	fi
	logger -p daemon.info -t junkyard-writable \
		"node $(cat "$state/node"): $(tr '\n' ';' <"$state/mounted")"
	eend 0
}
