#!/usr/bin/env bash
# Network-boot a diskless qemu VM (TCG) on one of the scenario's podman
# networks, through a tap device on the network's bridge, until its serial
# console shows PATTERN; print the console (escape sequences removed).
#   boot-vm.sh BRIDGE MAC bios|efi PATTERN [TIMEOUT]
# Exit 0 when PATTERN appeared, 1 when the timeout came first.  The VM's
# firmware is SeaBIOS or OVMF with qemu's default NIC ROM, Debian's iPXE
# (packages qemu-system-x86, ipxe-qemu, ovmf).
set -euo pipefail

bridge=$1 mac=$2 firmware=$3 pattern=$4 timeout=${5:-120}
tap=jy-nb-tap0
log=$(mktemp /tmp/jy-netboot-vm.XXXXXX)
qemu_pid=

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ -n "$qemu_pid" ]; then kill "$qemu_pid" 2>/dev/null || true; wait "$qemu_pid" 2>/dev/null || true; fi
  ip link del "$tap" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

# printable ASCII only: firmware and GRUB draw boxes in other code pages
console() {
  sed 's/\x1b\[[0-9;?]*[A-Za-z]//g' "$log" | tr '\r' '\n' | LC_ALL=C tr -cd '\11\12\40-\176' \
    | grep -av '^\s*$' || true
}

ip link del "$tap" 2>/dev/null || true
ip tuntap add "$tap" mode tap
ip link set "$tap" master "$bridge"
ip link set "$tap" up

case "$firmware" in
  bios) machine=(-machine "pc,graphics=off") ;;
  efi)  machine=(-machine "q35,graphics=off" -bios /usr/share/qemu/OVMF.fd) ;;
  *) echo "boot-vm.sh: firmware must be bios or efi" >&2; exit 2 ;;
esac

qemu-system-x86_64 -accel tcg -cpu max -m 512 -display none -monitor none -no-reboot \
  "${machine[@]}" -serial "file:$log" \
  -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
  -device "virtio-net-pci,netdev=n0,mac=$mac,bootindex=1" &
qemu_pid=$!

for ((i = 0; i < timeout; i++)); do
  if console | grep -aq -- "$pattern"; then
    console
    exit 0
  fi
  if ! kill -0 "$qemu_pid" 2>/dev/null; then break; fi
  sleep 1
done
console
echo "boot-vm.sh: '$pattern' did not appear within ${timeout} s" >&2
exit 1
