#!/sbin/openrc-run
# shellcheck shell=sh
# junkyard.cluster: rsyslog under OpenRC.  Debian 12's rsyslog ships only a
# systemd unit; on the nodes /var/log is the node's own dataset, mounted by
# the initramfs before init, so the logs land there from the first message.

# openrc-run reads these.
# shellcheck disable=SC2034
description="System logger (rsyslogd) writing to the node's own /var/log"
command=/usr/sbin/rsyslogd
# shellcheck disable=SC2034
pidfile=/run/rsyslogd.pid
# shellcheck disable=SC2034
command_args="-i ${pidfile}"

depend() {
	provide logger
	after localmount mountall.sh bootmisc.sh
}
