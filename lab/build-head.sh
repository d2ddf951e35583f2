#!/bin/bash
# Build the lab's head VM disk image natively on this machine.
#
#   build-head.sh OUTDIR PACKAGES_FILE
#
# Writes OUTDIR/head.img (raw ext4 file system, no partition table),
# OUTDIR/vmlinuz, OUTDIR/initrd.img and OUTDIR/manifest (kernel version,
# zfs version).  The ZFS module is compiled here, in the chroot, for the
# guest's kernel (zfs-dkms from contrib); the VM only loads it.
# Environment: JUNKYARD_LAB_MIRROR, JUNKYARD_LAB_SECURITY_MIRROR,
# JUNKYARD_LAB_HEAD_SIZE (default 6G).
set -euo pipefail

out=${1:?usage: build-head.sh OUTDIR PACKAGES_FILE}
pkgfile=${2:?usage: build-head.sh OUTDIR PACKAGES_FILE}
mirror=${JUNKYARD_LAB_MIRROR:-http://deb.debian.org/debian}
secmirror=${JUNKYARD_LAB_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
size=${JUNKYARD_LAB_HEAD_SIZE:-6G}
suite=bookworm

root="$out/root"
mounted=()

cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[$i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap "exit 130" INT TERM

mnt() {  # mnt TYPE SRC DEST [opts...]
    local type=$1 src=$2 dest=$3
    shift 3
    mkdir -p "$dest"
    if [ "$type" = bind ]; then
        mount --bind "$src" "$dest" "$@"
    else
        mount -t "$type" "$src" "$dest" "$@"
    fi
    mounted+=("$dest")
}

# KCFLAGS=-g0: the ZFS module (and the kernel checks of its configure) are
# compiled without debug information, which nobody reads in the lab (the guest
# kernel's headers ship no vmlinux, so kbuild makes no BTF for it either).
in_root() {
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive KCFLAGS=-g0 "$@"
}

phase() { printf '[build-head %(%H:%M:%S)T] %s\n' -1 "$*"; }

mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$pkgfile")

rm -rf "$root"
mkdir -p "$out"

phase "debootstrap $suite from $mirror"
debootstrap --variant=minbase --components=main,contrib \
    --include=systemd-sysv,udev,dbus,kmod,iproute2,openssh-server,python3,ca-certificates \
    "$suite" "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
    || { tail -n 30 "$out/debootstrap.log" >&2; exit 1; }

cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main contrib
deb $mirror $suite-updates main contrib
deb $secmirror $suite-security main contrib
SRC
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

mnt proc proc "$root/proc"
mnt sysfs sysfs "$root/sys"
mnt bind /dev "$root/dev"
mnt devpts devpts "$root/dev/pts" -o newinstance,ptmxmode=0666
mnt tmpfs tmpfs "$root/tmp"

phase "apt-get install kernel, headers, ${#packages[@]} packages"
in_root apt-get update -q >"$out/apt.log" 2>&1
in_root apt-get install -y -q --no-install-recommends linux-image-amd64 linux-headers-amd64 \
    >>"$out/apt.log" 2>&1 || { tail -n 30 "$out/apt.log" >&2; exit 1; }
kver=$(find "$root/lib/modules" -mindepth 1 -maxdepth 1 -name "*-amd64" -printf "%f\n" | sort -V | tail -n 1)
phase "kernel $kver; installing zfs-dkms and the rest (the module is built now)"
in_root apt-get install -y -q --no-install-recommends "${packages[@]}" \
    >>"$out/apt.log" 2>&1 || { tail -n 30 "$out/apt.log" >&2; exit 1; }

# dkms in a chroot may build for the host's running kernel only: build for
# the guest kernel explicitly.
if ! ls "$root/lib/modules/$kver/updates/dkms/zfs.ko"* >/dev/null 2>&1; then
    phase "dkms autoinstall -k $kver"
    in_root dkms autoinstall -k "$kver" >>"$out/apt.log" 2>&1 \
        || { tail -n 30 "$out/apt.log" >&2; exit 1; }
fi
ls "$root/lib/modules/$kver/updates/dkms/zfs.ko"* >/dev/null
in_root depmod -a "$kver"

phase "configuring the image"
in_root apt-get clean
# baked in to save emulated apt work, not started: the monitoring role
# configures them first (management address only) and then starts them
in_root systemctl disable prometheus.service prometheus-node-exporter.service >/dev/null 2>&1
rm -f "$root/usr/sbin/policy-rc.d"
echo head >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\thead\n' >"$root/etc/hosts"
printf '/dev/vda\t/\text4\terrors=remount-ro\t0 1\n' >"$root/etc/fstab"
# the lab's root password is locked; access is by the key given at boot
in_root passwd -l root >/dev/null
rm -f "$root"/etc/ssh/ssh_host_*
install -m 0644 /dev/stdin "$root/etc/ssh/sshd_config.d/lab.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF

# stable interface names: the lab gives each NIC a fixed MAC address
net=$root/etc/systemd/network
mkdir -p "$net"
for nic in mgmt:52:54:00:77:00:01:10.77.0.1 data:52:54:00:78:00:01:10.78.0.1; do
    name=${nic%%:*}
    rest=${nic#*:}
    mac=${rest%:*}
    ip=${rest##*:}
    printf '[Match]\nMACAddress=%s\n\n[Link]\nName=%s\n' "$mac" "$name" >"$net/10-$name.link"
    printf '[Match]\nName=%s\n\n[Network]\nAddress=%s/24\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
        "$name" "$ip" >"$net/20-$name.network"
done
printf '[Match]\nMACAddress=52:54:00:77:ff:01\n\n[Link]\nName=lab0\n' >"$net/10-lab0.link"
printf '[Match]\nName=lab0\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n[DHCPv4]\nUseDNS=no\n' \
    >"$net/20-lab0.network"
in_root systemctl enable systemd-networkd.service >/dev/null 2>&1
in_root systemctl disable systemd-networkd-wait-online.service >/dev/null 2>&1 || true

# Ansible's module payloads compiled once, not at every task (lab/jylab/zipcache.py): a
# .pth hook in the head's Python, its cache root-only; the node images never carry it
dist=$root/usr/lib/python3/dist-packages
install -m 0644 "$(dirname "$0")/jylab/zipcache.py" "$dist/jylab_zipcache.py"
printf 'import jylab_zipcache; jylab_zipcache.install()\n' >"$dist/jylab-zipcache.pth"
install -d -m 0700 "$root/var/cache/jylab-zipcache"

# packages come through the lab's proxy (qemu guestfwd to the host's loopback)
printf 'Acquire::http::Proxy "http://10.0.2.100:3142";\n' >"$root/etc/apt/apt.conf.d/01lab-proxy"

# the lab hands the SSH key to the VM through qemu's fw_cfg at every boot
install -m 0755 /dev/stdin "$root/usr/local/sbin/lab-fwcfg" <<'SH'
#!/bin/sh
# Copy the lab's SSH key (qemu -fw_cfg name=opt/junkyard/authorized_keys) to root.
modprobe qemu_fw_cfg 2>/dev/null || true
src=/sys/firmware/qemu_fw_cfg/by_name/opt/junkyard/authorized_keys/raw
[ -r "$src" ] || exit 0
install -d -m 0700 /root/.ssh
install -m 0600 "$src" /root/.ssh/authorized_keys
SH
install -m 0644 /dev/stdin "$root/etc/systemd/system/lab-fwcfg.service" <<'UNIT'
[Unit]
Description=Install the lab SSH key from qemu fw_cfg
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/lab-fwcfg

[Install]
WantedBy=multi-user.target
UNIT
install -m 0644 /dev/stdin "$root/etc/systemd/system/lab-ssh-keys.service" <<'UNIT'
[Unit]
Description=Generate SSH host keys on first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
UNIT
in_root systemctl enable lab-fwcfg.service lab-ssh-keys.service >/dev/null 2>&1
# a console on the serial port, and "booted" marker for the lab's status
in_root systemctl enable serial-getty@ttyS0.service >/dev/null 2>&1 || true
for svc in dnsmasq nfs-server rpcbind zfs-zed; do
    in_root systemctl disable "$svc" >/dev/null 2>&1 || true
done
: >"$root/etc/machine-id"

# shellcheck disable=SC2016  # dpkg-query's own format syntax
zfsver=$(in_root dpkg-query -W -f '${Version}' zfs-dkms)
cp -L "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp -L "$root/boot/initrd.img-$kver" "$out/initrd.img"

for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}"; done
mounted=()

phase "mkfs.ext4 -d ($size, sparse)"
rm -f "$out/head.img.tmp"
truncate -s "$size" "$out/head.img.tmp"
mkfs.ext4 -q -F -L headroot -d "$root" "$out/head.img.tmp"
mv "$out/head.img.tmp" "$out/head.img"
rm -rf "$root"
printf 'kernel=%s\nzfs=%s\n' "$kver" "$zfsver" >"$out/manifest"
phase "done: kernel $kver, zfs $zfsver"
