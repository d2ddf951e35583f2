"""The junkyard lab: a virtual cluster (qemu VMs in a network namespace) for site.yml."""
