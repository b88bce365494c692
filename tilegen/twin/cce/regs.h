// tilegen real-API twin: special registers the high-level APIs touch that the twin's other files do not.
//
// CTRL (get_ctrl / set_ctrl; impl/basic_api/dav_c220/kernel_operator_common_impl.h SetCtrlSprImpl /
// GetCtrlSprImpl, impl/basic_api/kernel_reg.h SetHF32ModeImpl, SetHF32TransModeImpl,
// SetMMLayoutTransformImpl): one 64-bit register per core, 0 at launch (an assumption: the launch value is
// not documented). The bits the Matmul API sets (MM_LAYOUT_MODE_BIT: SetMMColumnMajor-SetMMRowMajor.md, the
// order in which the cube walks M and N, HF32_MODE_BIT / HF32_TRANS_MODE_BIT: SetHF32Mode.md, fp32 inputs)
// change no result the twin computes (mad takes fp16/bf16 inputs); they are kept and read back.
#ifndef TILEGEN_CCE_REGS_H
#define TILEGEN_CCE_REGS_H

#include <cstdint>

namespace cce_rt {
uint64_t& CtrlRegister();  // defined in runtime.cpp (per core)
}  // namespace cce_rt

inline int64_t get_ctrl() { return static_cast<int64_t>(cce_rt::CtrlRegister()); }
inline void set_ctrl(uint64_t v) { cce_rt::CtrlRegister() = v; }

#endif  // TILEGEN_CCE_REGS_H
