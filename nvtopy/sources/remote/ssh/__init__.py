"""Machines reached over SSH (``--ssh``): the targets, the ssh command, the sessions, the source."""
