#include "errors.h"

namespace peerlink::pt {

void rethrow_translated(const char* what, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const InvalidArgument& x) {
    C10_THROW_ERROR(ValueError, c10::str("peerlink ", what, ": ", x.what()));
  } catch (const UnsupportedError& x) {
    C10_THROW_ERROR(NotImplementedError, c10::str("peerlink ", what, ": ", x.what()));
  } catch (const TimeoutError& x) {
    C10_THROW_ERROR(DistBackendError, c10::str("peerlink ", what, ": timeout: ", x.what()));
  } catch (const PeerLostError& x) {
    C10_THROW_ERROR(DistBackendError, c10::str("peerlink ", what, ": peer lost: ", x.what()));
  } catch (const Error& x) {
    C10_THROW_ERROR(DistBackendError, c10::str("peerlink ", what, ": ", x.what()));
  }
}

}  // namespace peerlink::pt
