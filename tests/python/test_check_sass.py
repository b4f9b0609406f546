"""scripts/check_sass.py: the SASS parser behind the build's QGMMA check and the library comparisons (no GPU, no
CUDA tools: it parses a fixed cuobjdump excerpt)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import check_sass  # noqa: E402

DUMP = """
\tcode for sm_90a
\t\tFunction : _ZN7fp8attn4sm9010fwd_kernelINS0_12KernelTraitsILi128ELi128ELi128ELi128ELb1EEEEEvT_
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                  /* 0x00000a00ff017b82 */
                                                                                           /* 0x000fe20000000800 */
        /*0010*/              @!P0 BRA 0x7f30 ;                                            /* 0x0000007c00008947 */
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0 ;  /* 0x... */
        /*0030*/              @UP0 MUFU.EX2 R3, R2 ;                                       /* 0x... */
        /*0040*/                   MUFU.EX2 R4, R5 ;                                       /* 0x... */
\t\t..........
\t\tFunction : _ZN7fp8attn4sm9014combine_kernelEv
        /*0000*/                   EXIT ;                                                  /* 0x... */
"""


def test_counts_opcodes_without_modifiers_or_predicates() -> None:
    functions = check_sass.parse_sass(DUMP)
    fwd = "_ZN7fp8attn4sm9010fwd_kernelINS0_12KernelTraitsILi128ELi128ELi128ELi128ELb1EEEEEvT_"
    assert [op for op, _ in functions[fwd]] == ["LDC", "BRA", "QGMMA", "MUFU", "MUFU"]
    assert functions[fwd][1][1] == "@!P0 BRA 0x7f30 ;"  # the text compared between builds: no address, no encoding
    assert [op for op, _ in functions["_ZN7fp8attn4sm9014combine_kernelEv"]] == ["EXIT"]


def test_labels_a_forward_kernel_by_its_traits() -> None:
    demangled = ("void fp8attn::sm90::fwd_kernel<fp8attn::sm90::KernelTraits<(int)64, (int)64, (int)192, (int)128, "
                 "(bool)1>, fp8attn::sm90::KernelParams<fp8attn::sm90::KernelTraits<(int)64, (int)64, (int)192, "
                 "(int)128, (bool)1> > >(fp8attn::sm90::KernelParams<...>)")
    assert check_sass.label(demangled, 70) == "fwd_kernel<64, 64, 192, 128, 1>"


def test_pairs_anonymous_namespace_kernels_of_two_build_trees() -> None:
    # The same kernel built under two paths: its anonymous namespace's hash differs, the key must not.
    name = "_ZN7fp8attn4sm9043_GLOBAL__N__{}_10_combine_cu_4bc5e62614combine_kernelENS0_11CombineArgsE"
    dumps = [f"\t\tFunction : {name.format(h)}\n"
             "        /*0000*/                   EXIT ;                                                  /* 0x... */\n"
             for h in ("859655b8", "3dc8ca98")]
    keys = [set(check_sass.parse_sass(d)) for d in dumps]
    assert keys[0] == keys[1] == {name.format("00000000")}
