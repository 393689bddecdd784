// Stand-in PTO-ISA header for pypto-tune's emulated Ascend box (tests/npu_emulator/README.md). Test-only.
//
// The R3 environment check (domain D.2) accepts a PTO-ISA clone when some file under
// $PTO_TILE_LIB_CODE_PATH/include/pto/ mentions DivAlgorithm: clones older than the division-algorithm
// selection lack it. This file exists only so that the emulated box passes that check; it is not PTO-ISA.
#pragma once

namespace pto {
enum class DivAlgorithm { DEFAULT = 0, HIGH_PRECISION = 1 };
}  // namespace pto
