// The real NCCL as an InterNodeEngine (nccl_engine.h). Every call maps one to one onto the real
// library's; results other than ncclSuccess become peerlink's error types with the real library's
// own message, so the shim's result_of gives the program the code the real NCCL gave.
#include "nccl_engine.h"

#include <string>
#include <vector>

#include "shim.h"

namespace peerlink::nccl {
namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::F32: return ncclFloat32;
    case DataType::F16: return ncclFloat16;
    case DataType::BF16: return ncclBfloat16;
    case DataType::F64: return ncclFloat64;
    case DataType::I32: return ncclInt32;
    case DataType::I64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

class NcclEngine : public InterNodeEngine {
 public:
  NcclEngine(const RealNccl* real, ncclComm_t comm, int device) : r_(real), comm_(comm), device_(device) {
    check(r_->ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(r_->ncclCommCount(comm_, &size_), "ncclCommCount");
  }
  ~NcclEngine() override {
    if (comm_) r_->ncclCommDestroy(comm_);
  }

  ncclComm_t comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "real NCCL"; }

  void allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, void* s) override {
    check(r_->ncclAllReduce(send, recv, count, nccl_type(dt), nccl_op(op), comm_, stream(s)), "ncclAllReduce");
  }
  void reduce_scatter(const void* send, void* recv, size_t n, DataType dt, ReduceOp op, void* s) override {
    check(r_->ncclReduceScatter(send, recv, n, nccl_type(dt), nccl_op(op), comm_, stream(s)), "ncclReduceScatter");
  }
  void reduce(const void* send, void* recv, size_t n, DataType dt, ReduceOp op, int root, void* s) override {
    check(r_->ncclReduce(send, recv, n, nccl_type(dt), nccl_op(op), root, comm_, stream(s)), "ncclReduce");
  }
  void all_gather(const void* send, void* recv, size_t bytes, void* s) override {
    check(r_->ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream(s)), "ncclAllGather");
  }
  void broadcast(const void* send, void* recv, size_t bytes, int root, void* s) override {
    check(r_->ncclBroadcast(send, recv, bytes, ncclUint8, root, comm_, stream(s)), "ncclBroadcast");
  }
  void group_start() override { check(r_->ncclGroupStart(), "ncclGroupStart"); }
  void group_end() override { check(r_->ncclGroupEnd(), "ncclGroupEnd"); }
  void send(int peer, const void* buf, size_t bytes, void* s) override {
    check(r_->ncclSend(buf, bytes, ncclUint8, peer, comm_, stream(s)), "ncclSend");
  }
  void recv(int peer, void* buf, size_t bytes, void* s) override {
    check(r_->ncclRecv(buf, bytes, ncclUint8, peer, comm_, stream(s)), "ncclRecv");
  }

  // Control data through the real library (device memory only): staged in a device buffer, one
  // all-gather on a private stream, waited for. Creation time only, never inside a capture.
  void exchange(const void* mine, size_t bytes, void* all) override {
    if (bytes == 0) return;
    struct Buf {
      void* p;
      ~Buf() {
        try {
          device::free(p);
        } catch (...) {
        }
      }
    } buf{device::alloc(bytes * static_cast<size_t>(size_ + 1))};
    char* in = static_cast<char*>(buf.p) + bytes * static_cast<size_t>(size_);
    device::copy_sync(in, mine, bytes);
    device::Stream s = device::stream_create();
    try {
      all_gather(in, buf.p, bytes, s);
      device::stream_sync(s);
    } catch (...) {
      device::stream_destroy(s);
      throw;
    }
    device::stream_destroy(s);
    device::copy_sync(all, buf.p, bytes * static_cast<size_t>(size_));
  }

  std::unique_ptr<InterNodeEngine> split(int color, int key) override {
    ncclComm_t child = nullptr;
    check(r_->ncclCommSplit(comm_, color == kNoColor ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr), "ncclCommSplit");
    if (!child) return nullptr;
    return std::make_unique<NcclEngine>(r_, child, device_);
  }
  std::unique_ptr<InterNodeEngine> shrink(const std::vector<int>& excluded) override {
    std::vector<int> list = excluded;
    ncclComm_t child = nullptr;
    check(r_->ncclCommShrink(comm_, list.data(), static_cast<int>(list.size()), &child, nullptr, NCCL_SHRINK_DEFAULT),
          "ncclCommShrink");
    return std::make_unique<NcclEngine>(r_, child, device_);
  }

  void check_async_error() override {
    ncclResult_t e = ncclSuccess;
    check(r_->ncclCommGetAsyncError(comm_, &e), "ncclCommGetAsyncError");
    if (e != ncclSuccess && e != ncclInProgress) check(e, "the real NCCL's asynchronous error");
  }
  void finalize() override { check(r_->ncclCommFinalize(comm_), "ncclCommFinalize"); }
  void abort() noexcept override {
    if (comm_) r_->ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  void revoke() override { check(r_->ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT), "ncclCommRevoke"); }

 private:
  static cudaStream_t stream(void* s) { return static_cast<cudaStream_t>(s); }
  void check(ncclResult_t r, const char* what) const {
    if (r == ncclSuccess) return;
    std::string msg = std::string("real NCCL ") + what + ": " + r_->ncclGetErrorString(r) + " (result " +
                      std::to_string(static_cast<int>(r)) + ")";
    if (const char* last = r_->ncclGetLastError(comm_)) msg += std::string(" (") + last + ")";
    if (!comm_) throw InvalidArgument(msg + " after ncclCommAbort");
    switch (r) {
      case ncclInvalidArgument:
      case ncclInvalidUsage: throw InvalidArgument(msg);
      case ncclRemoteError: throw PeerLostError(msg);
      case ncclSystemError: throw SysError(msg, 0, what);
      case ncclUnhandledCudaError: throw GpuError(msg, 0, what);
      default: throw Error(msg);
    }
  }

  const RealNccl* r_;
  ncclComm_t comm_;
  int device_;
  int rank_ = -1, size_ = 0;
};

}  // namespace

std::unique_ptr<InterNodeEngine> make_nccl_engine(const RealNccl* real, ncclComm_t comm, int device) {
  return std::make_unique<NcclEngine>(real, comm, device);
}

ncclComm_t nccl_engine_comm(InterNodeEngine& engine) {
  auto* e = dynamic_cast<NcclEngine*>(&engine);
  return e ? e->comm() : nullptr;
}

}  // namespace peerlink::nccl
