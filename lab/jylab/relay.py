"""Relay one connection between stdin/stdout and a TCP port on the host's loopback.

qemu's slirp runs this for every guest connection to the guestfwd address
(``guestfwd=tcp:10.0.2.100:3142-cmd:python3 relay.py 127.0.0.1 3142``): each
apt connection of the guest gets its own TCP connection to the lab's proxy.
"""

import os
import selectors
import socket
import sys


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    if host not in ("127.0.0.1", "localhost"):
        print("relay: loopback only", file=sys.stderr)
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
