"""Ask the running kernel's SELinux policy whether a domain may access a file's type.

The same question libselinux's security_compute_av asks, through selinuxfs directly (no
libselinux import on the hook's path): write "SCONTEXT TCONTEXT CLASS" to the `access`
transaction file, read back the allowed vector; the class's number and the permissions' bits
come from selinuxfs's `class/` tree. The answer is the loaded policy's, MLS/MCS constraints
included, so it holds for whatever policy the host runs (refpolicy, Fedora's targeted policy
with container-selinux, local modules). None means the kernel could not be asked.
"""

from __future__ import annotations

import os

SELINUXFS = "/sys/fs/selinux"


# What a container does with a bind-mounted source, by the kind's source file type: the
# object class and permissions the policy must allow. Executable kinds (libraries, which
# ld.so maps PROT_EXEC, and binaries) also need map and execute.
_USE = {
    "file": ("file", ("getattr", "open", "read")),
    "sock": ("sock_file", ("getattr", "write")),
    "dir": ("dir", ("getattr", "open", "read", "search")),
}


def use(source_type: str, executable: bool) -> tuple[str, tuple[str, ...]]:
    """(class, permissions) a container needs on a source of this file type ("file",
    "sock", "dir": kinds.Kind.source)."""
    tclass, perms = _USE[source_type]
    return tclass, perms + (("map", "execute") if executable else ())


def _number(path: str) -> int:
    with open(path, encoding="ascii") as handle:
        return int(handle.read().strip())


def request(scontext: str, tcontext: str, tclass: str, selinuxfs: str = SELINUXFS) -> bytes:
    """The access request for selinuxfs: the contexts and the class's number."""
    if any(c in text for text in (scontext, tcontext) for c in " \0\n"):
        raise ValueError("a context with a space, newline or NUL")
    index = _number(f"{selinuxfs}/class/{tclass}/index")
    return f"{scontext} {tcontext} {index}".encode()


def permission_bits(tclass: str, perms: tuple[str, ...], selinuxfs: str = SELINUXFS) -> int:
    """The access vector bits of `perms` in `tclass` (selinuxfs numbers them from 1)."""
    bits = 0
    for perm in perms:
        bits |= 1 << (_number(f"{selinuxfs}/class/{tclass}/perms/{perm}") - 1)
    return bits


def allowed_vector(reply: bytes) -> int:
    """The allowed vector of selinuxfs's answer ("ALLOWED DECIDED AUDITALLOW ..." in hex)."""
    return int(reply.split()[0], 16)


def allowed(
    scontext: str, tcontext: str, tclass: str, perms: tuple[str, ...], selinuxfs: str = SELINUXFS
) -> bool | None:
    """Whether the loaded policy allows `scontext` every one of `perms` on `tcontext`'s
    `tclass`; None when the kernel cannot be asked (no selinuxfs, an unknown class or
    permission, a context the policy does not know)."""
    try:
        wanted = permission_bits(tclass, perms, selinuxfs)
        query = request(scontext, tcontext, tclass, selinuxfs)
        fd = os.open(f"{selinuxfs}/access", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.write(fd, query)
            reply = os.read(fd, 256)
        finally:
            os.close(fd)
        return allowed_vector(reply) & wanted == wanted
    except (OSError, ValueError, IndexError):
        return None
