"""ELF facts of a linked kernel library (mod.so): what it needs on the device.

Read with pyelftools from the library's bytes, without loading it.
"""

from __future__ import annotations

import io
import re

from tvmc.errors import CodegenError

_GLIBC = re.compile(r"^GLIBC_(\d+)\.(\d+)(?:\.(\d+))?$")


def library_requirements(library: bytes) -> dict:
    """{"shared_libraries": DT_NEEDED names in link order, "glibc": the newest GLIBC_x.y symbol
    version the library references (None when it references none)} of an ELF shared library.

    This is what the device must provide to load mod.so (e.g. ["libgomp.so.1", "libc.so.6"] and
    "2.17"). Raises CodegenError when the bytes are not an ELF file.
    """
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    try:
        elf = ELFFile(io.BytesIO(library))
        needed, versions = [], []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                needed += [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            elif isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        m = _GLIBC.match(aux.name)
                        if m:
                            versions.append(tuple(int(g or 0) for g in m.groups()))
    except ELFError as e:
        raise CodegenError(f"the linked library is not a valid ELF file: {e}") from None
    glibc = max(versions) if versions else None
    return {"shared_libraries": needed,
            "glibc": None if glibc is None else ".".join(str(v) for v in (glibc if glibc[2] else glibc[:2]))}
