// comm: a full mesh of TCP connections between the ranks of a group, and a
// progress loop that moves several messages at once in the calling thread.
//
// Why not Gloo's pairs: Gloo hands every message through its event-loop
// thread, and on few busy cores that hand-off was most of a small
// message's time (a 1 KiB allreduce between two nodes took ~500 us, where
// OpenMPI's TCP transport takes ~10 us). Here the caller itself sends and
// receives on non-blocking sockets, spinning briefly before it sleeps in
// poll(), and all messages of a step progress together, so two ranks that
// send each other more than their sockets buffer never deadlock.
//
// Connections are authenticated: each rank publishes a fresh 32-byte key
// with its address in the job's (authenticated) store, and a connecting
// peer proves it read that key by HMAC over both sides' nonces; the
// listener proves itself back. A key never crosses the network.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/tcp_store.h"

namespace fmstack::comm {

struct TcpMeshOptions {
  std::string prefix;                  // store namespace of this mesh
  int rank = 0, size = 1;              // within the group
  std::vector<int> job_ranks;          // group rank -> job rank, for messages; empty = same
  std::string hostname = "127.0.0.1";  // address this rank listens on
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // How long a wait polls its sockets without sleeping. Spinning saves the
  // scheduler's wake-up (tens of microseconds) on an idle core; with more
  // busy ranks than cores it only steals from the peer being waited for.
  // busy_poll spins for the whole wait, as OpenMPI's progress loop does.
  // The short spin is skipped when more ranks of the mesh share this
  // machine (same boot id) than it has cores.
  std::chrono::microseconds spin{50};
  bool busy_poll = false;
};

// Every message is framed as its length (8 bytes), padding, then its
// bytes, and the padding puts the bytes at a multiple of kFrameAlign in
// the connection's stream. Why: the kernel copies a stream's bytes between
// its buffers (laid out in stream order) and ours with `rep movsb`, which on
// AMD Zen 3/4 falls from 16-56 to about 3 GB/s when the destination sits 8
// bytes past the source in a page; a bare 8-byte length walked every
// message's bytes through that distance (bench_copy_alignment prints the
// speeds).
// Both ends count the stream's bytes, so they agree on each padding.
inline constexpr size_t kFrameAlign = 64;
inline constexpr size_t kFrameLengthBytes = sizeof(uint64_t);
inline constexpr size_t kFrameHeaderMax = kFrameLengthBytes + kFrameAlign - 1;
// The header's bytes for a message whose frame starts at stream offset
// `stream_offset`: the length and padding, kFrameLengthBytes to
// kFrameHeaderMax, so that the message's bytes start at a multiple of
// kFrameAlign.
constexpr size_t FrameHeaderBytes(uint64_t stream_offset) {
  return kFrameLengthBytes +
         (kFrameAlign - (stream_offset + kFrameLengthBytes) % kFrameAlign) % kFrameAlign;
}

// One message of a step: `bytes` to or from group rank `peer`. A receive
// may name `on_data`, called with element-aligned [begin, end) byte ranges
// of `data` as they arrive, so a reduction overlaps the rest of the message.
struct Transfer {
  enum Kind : uint8_t { kSend, kRecv };
  Kind kind = kSend;
  int peer = -1;
  std::byte* data = nullptr;
  size_t bytes = 0;
  size_t align = 1;         // on_data ranges are multiples of this
  size_t notify_bytes = 0;  // on_data at least this far apart (0: at the end)
  void (*on_data)(void* ctx, size_t begin, size_t end) = nullptr;
  void* ctx = nullptr;
  // Index, in the same Run, of an earlier transfer that must finish (its
  // on_data included) before this one starts; -1: none.
  int64_t after = -1;
  // Progress, private to TcpMesh::Run. The header is the length and then
  // padding, kFrameHeaderMax bytes at most (see FrameHeaderBytes).
  size_t header_bytes = 0, header_done = 0, done = 0, notified = 0;
  alignas(8) std::byte header[kFrameHeaderMax] = {};
};

class TcpMesh {
 public:
  // Collective: every rank of the group constructs its mesh with the same
  // prefix. Throws Error naming the peer that could not be reached or
  // failed the handshake, after the timeout at most.
  TcpMesh(TcpStore& store, TcpMeshOptions options);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int rank() const { return o_.rank; }
  int size() const { return o_.size; }
  // More ranks of this mesh share this machine than it has cores.
  bool crowded() const { return crowded_; }

  // Moves every transfer to completion, all at once. Transfers to (from)
  // the same peer go one after another in list order, so both sides must
  // list them in the same order; others move together. Each message carries its length, so a peer
  // that called with another size is an error, not silent corruption. Throws Error naming the peer
  // and the bytes still missing on a closed connection, a size mismatch, Shutdown(), or the
  // timeout.
  void Run(std::span<Transfer> transfers, const char* op);

  // Thread-safe: shuts every connection down, so that this rank's pending
  // and later Run calls fail at once and so do the peers' that wait on it.
  void Shutdown();

 private:
  void Connect(TcpStore& store);
  int JobRank(int group_rank) const;
  bool Advance(Transfer& t, const char* op);
  [[noreturn]] void Lost(const Transfer& t, const char* op, const std::string& why) const;
  const Transfer& Waited(std::span<const Transfer> transfers) const;

  TcpMeshOptions o_;
  std::vector<int> fds_;  // by group rank; -1 for this rank
  // Bytes of messages sent to and received from each peer: where the next
  // frame starts in each direction's stream.
  std::vector<uint64_t> sent_, received_;
  int colocated_ = 1;     // ranks of this mesh on this machine, this one included
  bool crowded_ = false;  // colocated_ > cores
  std::atomic<bool> shut_{false};
  // Run's working state, kept to spare allocations: its poll set, each
  // lane's last transfer (by peer and kind), each transfer's successor in
  // its lane, and the lanes' current transfers.
  std::vector<pollfd> waits_;
  std::vector<int64_t> lane_tail_, next_, heads_;
};

}  // namespace fmstack::comm
