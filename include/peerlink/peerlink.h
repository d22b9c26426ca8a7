// Umbrella header of peerlink.
#pragma once
#include "peerlink/errors.h"
#include "peerlink/device.h"
#include "peerlink/options.h"
#include "peerlink/request.h"
#include "peerlink/communicator.h"
#if __has_include("peerlink/collectives.h")
#include "peerlink/collectives.h"
#include "peerlink/windows.h"
#endif
#if __has_include("peerlink/fused.h")
#include "peerlink/fused.h"
#endif
#if __has_include("peerlink/multinode.h")
#include "peerlink/multinode.h"
#endif
#if __has_include("peerlink/topology.h")
#include "peerlink/topology.h"
#endif
