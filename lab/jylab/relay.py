"""Relay one connection between stdin/stdout and the lab's package proxy.

qemu's slirp runs this for every guest connection to the guestfwd address
(``guestfwd=tcp:10.0.2.100:3142-cmd:python3 relay.py 127.0.0.1 3142``): each
apt connection of the guest gets its own TCP connection to the lab's proxy.

In the head VM, a socket unit on 127.0.0.1:3142 runs it for every connection
(``relay.py 10.0.2.100 3142``, see cli.install_head_proxy): the inventory's
``cluster_apt_proxy`` is then the same URL on the head as on the lab machine,
where the node image seed is built.
"""

import os
import selectors
import socket
import sys

# The guestfwd address of the head VM's user network (vm.GUESTFWD_ADDR; this
# file runs alone, with python3 -I -S, so it cannot import it).
GUESTFWD_ADDR = "10.0.2.100"


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    if host not in ("127.0.0.1", "localhost", GUESTFWD_ADDR):
        print(f"relay: loopback or {GUESTFWD_ADDR} only", file=sys.stderr)
        return 2
    sock = socket.create_connection((host, port), timeout=10)
    sock.settimeout(None)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "in")
    sel.register(sock, selectors.EVENT_READ, "sock")
    open_dirs = 2
    while open_dirs:
        for key, _events in sel.select():
            if key.data == "in":
                data = os.read(0, 65536)
                if data:
                    sock.sendall(data)
                else:
                    sel.unregister(0)
                    sock.shutdown(socket.SHUT_WR)
                    open_dirs -= 1
            else:
                data = sock.recv(65536)
                if data:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(1, view):]
                else:
                    sel.unregister(sock)
                    open_dirs -= 1
                    return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
