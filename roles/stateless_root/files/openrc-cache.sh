#!/bin/sh
# Keep OpenRC's dependency cache in the image current.  A stateless node
# starts with an empty /run/openrc, so OpenRC would source every init script
# to compute the service dependencies at every boot (20 s on the lab's
# emulated nodes).  OpenRC's init.sh copies $RC_LIBEXECDIR/cache into
# /run/openrc first, when it holds a softlevel file (the cache the savecache
# service writes at shutdown on a writable root), and OpenRC keeps a cached
# deptree that is newer than every init script, conf.d file, rc.conf and
# every file the deptree's depconfig names.  Run inside the image; prints
# "updated" when it wrote the cache, "current" when it was already up to date.
set -eu
libexec=${1:-/usr/lib/rc}
cache=$libexec/cache
svcdir=/run/openrc

stale() {
  [ -s "$cache/deptree" ] || return 0
  # the files OpenRC compares with the deptree at boot (rc_deptree_update_needed)
  set -- /etc/init.d /etc/conf.d /etc/rc.conf /usr/local/etc/init.d
  if [ -s "$cache/depconfig" ]; then
    while IFS= read -r f; do set -- "$@" "$f"; done <"$cache/depconfig"
  fi
  [ -n "$(find "$@" -newer "$cache/deptree" -print 2>/dev/null | head -n 1)" ]
}

if ! stale; then
  echo current
  exit 0
fi

made=
if [ ! -d "$svcdir" ]; then
  mkdir -p "$svcdir"
  made=yes
fi
rm -f "$svcdir/deptree" "$svcdir/depconfig"
"$libexec/bin/rc-depend" -u >/dev/null
mkdir -p "$cache"
cp "$svcdir/deptree" "$cache/deptree.new"
if [ -e "$svcdir/depconfig" ]; then cp "$svcdir/depconfig" "$cache/depconfig"; else rm -f "$cache/depconfig"; fi
mv "$cache/deptree.new" "$cache/deptree"
# init.sh copies the cache only when softlevel is there (and then writes
# "sysinit" into it itself)
echo sysinit >"$cache/softlevel"
if [ -n "$made" ]; then rm -rf "$svcdir"; fi
echo updated
