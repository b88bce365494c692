// The platform figures of the target (PEER_AIC, PEER_AIV, PEER_L1, ...), set by
// tilegen/harness/ascend_peer.py for the tiling tool: read by platform_shim.cpp's PlatformAscendC
// stand-in and by fa_tiling.cpp alike.
#ifndef TILEGEN_PEER_PLATFORM_H
#define TILEGEN_PEER_PLATFORM_H

#include <cstdint>

// The figure `name` from the environment; a missing one ends the tool (exit 2) naming it.
uint64_t PeerPlatformFigure(const char* name);

#endif  // TILEGEN_PEER_PLATFORM_H
