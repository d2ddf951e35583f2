# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bootstrap pip into ansible-test's sanity virtual environments without its download.

ansible-test creates every sanity virtual environment without pip and then
runs a pip bootstrap script that it downloads from ci-files.testing.ansible.com
(a host CI cannot reach), unless the script is already in its cache,
``~/.ansible/test/cache/get_pip_<version>.py``.  ``make sanity`` puts this file
there (under a HOME of its own in .cache).  It does what the downloaded script
does with the arguments ansible-test passes (pip options and pinned packages,
``pip==<version>`` among them): it installs the pip that ships with Python
(``ensurepip``), then has that pip install the packages from the package index.
"""

import subprocess
import sys

# Options of the downloaded script that pip's own ``install`` does not have.
_SCRIPT_ONLY = ("--no-setuptools", "--no-wheel")


def main(argv):
    """Install pip, then the requested packages, into the running interpreter's environment."""
    # In a child process: ensurepip.bootstrap() would leave PIP_CONFIG_FILE=/dev/null
    # in this one's environment, and the install below needs pip's configuration
    # (index, proxy certificate).
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
    args = [a for a in argv if a not in _SCRIPT_ONLY]
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--upgrade", *args])


if __name__ == "__main__":
    main(sys.argv[1:])
