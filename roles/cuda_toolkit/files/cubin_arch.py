#!/usr/bin/env python3
"""Report the GPU architecture a cubin was built for, read from its ELF header and notes.

Prints JSON: {"machine": 190, "sm": 120, "ptxas_arch": "sm_120a"}. No CUDA tool is needed
(cuobjdump is not part of every toolkit install), only the ELF layout NVIDIA uses.
"""

from __future__ import annotations

import json
import re
import struct
import sys

EM_CUDA = 190  # ELF e_machine for NVIDIA CUDA (elf.h)
ELF_ABI_VERSION_OFFSET = 8  # e_ident[EI_ABIVERSION]
# From CUDA ELF ABI version 8 on (seen with nvcc 12.8 to 13.x) the SM number sits in bits 8-15
# of e_flags; older cubins kept it in bits 0-7.
ABI_WITH_SHIFTED_SM = 8
TOOLKIT_NOTE_SECTION = b".note.nv.tkinfo"  # holds the ptxas command line, e.g. "-arch sm_120a"


def section_bytes(data: bytes, wanted: bytes) -> bytes:
    e_shoff = struct.unpack_from("<Q", data, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    names_offset = headers[e_shstrndx][4]
    for name_index, _type, _flags, _addr, offset, size in headers:
        name = data[names_offset + name_index : data.index(b"\0", names_offset + name_index)]
        if name == wanted:
            return data[offset : offset + size]
    return b""


def describe(path: str) -> dict[str, object]:
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF":
        raise SystemExit(f"{path}: not an ELF file")
    machine = struct.unpack_from("<H", data, 0x12)[0]
    flags = struct.unpack_from("<I", data, 0x30)[0]
    shifted = data[ELF_ABI_VERSION_OFFSET] >= ABI_WITH_SHIFTED_SM
    sm = (flags >> 8) & 0xFF if shifted else flags & 0xFF
    arch = re.search(rb"-arch (sm_[0-9]+[af]?)", section_bytes(data, TOOLKIT_NOTE_SECTION))
    return {"machine": machine, "sm": sm, "ptxas_arch": arch.group(1).decode() if arch else None}


if __name__ == "__main__":
    result = describe(sys.argv[1])
    print(json.dumps(result))
    sys.exit(0 if result["machine"] == EM_CUDA else 1)
