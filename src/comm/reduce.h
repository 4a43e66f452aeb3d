// comm: the elementwise arithmetic of reductions, shared by every transport.
#pragma once

#include <span>

#include "comm/communicator.h"

namespace fmstack::comm {

// dst[i] += src[i] for count elements of dtype (bf16 sums in fp32, rounded).
void AddInto(std::byte* dst, const std::byte* src, size_t count, DType dtype);
// dst[i] *= factor.
void ScaleInPlace(std::byte* dst, size_t count, DType dtype, double factor);
// dst[i] = sum over srcs of src[i], in the order given (deterministic).
void SumOf(std::byte* dst, std::span<const std::byte* const> srcs, size_t count, DType dtype);

void CheckSameType(const View& a, const View& b, const char* op);

// Rank `rank`'s shard of a reduce-scatter of `in` into `out`, or of an
// allgather of `in` into `out`; throws CommError naming `job_rank` when the
// buffer sizes do not match the shard.
Range ReduceScatterShard(const View& in, const View& out, int size, int rank, int job_rank);
Range AllGatherShard(const View& in, const View& out, int size, int rank, int job_rank);

}  // namespace fmstack::comm
