#include "cli/glossary.h"

#include <algorithm>
#include <array>

namespace fmstack::cli {
namespace {

// Order: what a reader of plan and sim meets first comes first.
constexpr std::array<Term, 34> kTerms = {{
    {"accelerator", "one GPU or Trainium chip; a node (instance) holds several"},
    {"MFU",
     "model FLOPs utilization: the model's training FLOPs per second (6 × parameters × tokens/s, "
     "or the detailed count with attention) over the accelerators' dense peak for the job's "
     "precision"},
    {"DP, TP, PP, CP, EP",
     "data, tensor, pipeline, context (sequence) and expert parallelism: how many ways each "
     "dimension is split"},
    {"ZeRO stage",
     "1 shards optimizer state across data-parallel ranks, 2 also gradients, 3 (FSDP) also "
     "parameters"},
    {"micro-batch",
     "the sequences one data-parallel rank computes at once; a step accumulates global_batch / "
     "(dp × micro_batch) of them"},
    {"bubble",
     "the idle time of a pipeline at the start and end of each step, (pp − 1) / micro-batches of "
     "it"},
    {"exposed communication",
     "the part of a step's communication that compute does not hide: tensor, context, pipeline "
     "and expert exchanges, and the data-parallel gradient reduction beyond what the backward "
     "pass overlaps"},
    {"MTTI",
     "mean time to interruption of the whole job: how long it runs, on average, before some "
     "node's fault stops it. A job of N nodes with a per-node MTBF of M has MTTI ≈ M / N"},
    {"MTBF", "mean time between failures of one node (`cluster.node_mtbf`)"},
    {"fault set",
     "a published study's interruption causes, each with a rate per node-hour, a detection time "
     "and a recovery (`faults.set`; `fmstack catalog list faults`)"},
    {"planned maintenance",
     "a node taken out on notice (a host update, a drain): the job saves first, so no work is "
     "lost, and moves the node's ranks to a spare or waits"},
    {"interruption",
     "an unplanned fault that stops the job: some rank's work since its last "
     "restorable state is lost"},
    {"blocking save",
     "the time a checkpoint stops training: the copy of the state into host memory; writing to "
     "the tiers continues behind"},
    {"tier",
     "where a checkpoint copy lives: node-local disk, a shared file system (the Lustre role), an "
     "object store (S3)"},
    {"Young/Daly interval",
     "the checkpoint interval that minimises expected overhead: √(2 × blocking save × MTTI) to "
     "first order (Young 1974); fmstack uses Daly's higher-order form (Daly 2006), which adds "
     "terms in √(blocking / MTTI)"},
    {"checkpoint-restart",
     "recovery policy: replace the failed node, restart every rank, restore the newest "
     "checkpoint"},
    {"checkpointless",
     "recovery policy: the lost ranks' state comes from replicas in their peers' memory instead "
     "of storage; the replacement node still has to come from a spare or a repair"},
    {"elastic",
     "recovery policy: with no spare ready, continue with fewer data-parallel replicas at the "
     "same global batch, and grow back later"},
    {"spare", "a node held idle in the allocation to replace a failed one at once"},
    {"peer rebuild",
     "restarting the process group around a replacement node without reloading from storage "
     "(`resilience.peer_rebuild`)"},
    {"peer state transfer",
     "sending a replacement node its ranks' training state from the peers that hold replicas, "
     "over its network links"},
    {"goodput",
     "the share of wall time spent on training steps that count: wall time minus detection, "
     "restart or restore, lost (recomputed) work, checkpoint stalls, waiting for a node and "
     "maintenance"},
    {"ETTR",
     "effective training time ratio: the goodput as a share of the run's wall time. Meta's Llama "
     "3 report gives > 90% for its 54 days"},
    {"lost work",
     "steps trained after the checkpoint (or peer replica) that a recovery restores, so trained "
     "again"},
    {"detection",
     "time from a fault to the moment the job knows of it: at once for a crash, a heartbeat "
     "timeout for a hang"},
    {"restart / restore",
     "time to start the ranks again and load their state, from a checkpoint tier or from peers"},
    {"checkpoint stall", "the blocking saves, added over the run"},
    {"waiting for a node",
     "time with a failed node and no spare, until a replacement or the repair "
     "(`resilience.node_repair`) brings one"},
    {"degraded",
     "time an elastic job trains with fewer replicas; its lost throughput is counted here"},
    {"95% range",
     "the 2.5th and 97.5th percentiles over the Monte Carlo trials: where 95% of runs like this "
     "one land"},
    {"busbw / algbw",
     "nccl-tests' bus bandwidth (algorithm bandwidth × 2(n−1)/n for all-reduce) and bytes / time"},
    {"straggler",
     "a rank whose step compute is much slower than its peers' median "
     "(`resilience.straggler_factor`)"},
    {"generation", "one start of a run's ranks; a restart or reshape begins a new one"},
    {"incident",
     "one fault a live run met, with its detection, recovery and lost steps, in the "
     "run's goodput ledger (`fmstack report`)"},
}};

// Appends `text` wrapped at `width`, continuation lines indented by `indent`.
void Wrap(std::string& out, std::string_view text, size_t indent, size_t width) {
  size_t column = indent;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    if (column > indent && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();  // bytes, close enough for the few multi-byte signs
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  }
  out += '\n';
}

}  // namespace

std::span<const Term> Glossary() {
  return kTerms;
}

std::string ExplainTerms(std::span<const std::string_view> names, size_t width) {
  size_t name_width = 0;
  for (const Term& t : kTerms) {
    if (std::find(names.begin(), names.end(), t.name) != names.end())
      name_width = std::max(name_width, t.name.size());
  }
  std::string out;
  for (const Term& t : kTerms) {
    if (std::find(names.begin(), names.end(), t.name) == names.end()) continue;
    out += std::string(t.name) + std::string(name_width + 2 - t.name.size(), ' ');
    Wrap(out, t.meaning, name_width + 2, width);
  }
  return out;
}

}  // namespace fmstack::cli
