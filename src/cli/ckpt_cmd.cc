// `fmstack ckpt ls | verify | inspect | export`: look at, check and convert
// the checkpoints of a job (its [checkpoint] tiers), a directory, or an S3 URL.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>

#include "catalog/catalog.h"
#include "ckpt/format.h"
#include "ckpt/restore.h"
#include "ckpt/tier.h"
#include "ckpt/torch_file.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "gpt/hf_names.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

struct CkptArgs {
  std::string target;    // job.toml, a directory, or s3://bucket/prefix
  std::string out;       // run directory of a job (its local tier is <out>/ckpt)
  std::string endpoint;  // S3 endpoint for an s3:// target
  int64_t step = -1;     // -1 = the newest committed
  std::string file;      // export: where to write
  std::string format = "safetensors", names = "hf";  // export
};

ckpt::S3Config S3FromUrl(const std::string& url, const std::string& endpoint,
                         const std::string& region) {
  ckpt::S3Config c;
  const std::string rest = url.substr(5);
  const auto slash = rest.find('/');
  c.bucket = rest.substr(0, slash);
  c.prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  c.endpoint = endpoint.empty() ? "https://s3.amazonaws.com" : endpoint;
  c.region = region;
  return c;
}

std::vector<std::unique_ptr<ckpt::Tier>> TiersOf(const CkptArgs& a) {
  if (a.target.rfind("s3://", 0) == 0) {
    std::vector<std::unique_ptr<ckpt::Tier>> t;
    t.push_back(ckpt::MakeS3Tier("object", S3FromUrl(a.target, a.endpoint, "")));
    return t;
  }
  if (a.target.size() > 5 && a.target.substr(a.target.size() - 5) == ".toml") {
    const catalog::Catalog catalog = catalog::Catalog::LoadEmbedded();
    const spec::JobSpec job = spec::LoadJobSpec(a.target, catalog);
    const std::string run_dir = a.out.empty() ? "runs/" + job.name : a.out;
    // Looking creates nothing: a tier whose directory is missing holds no step.
    const std::string local =
        job.checkpoint.local_dir.empty() ? run_dir + "/ckpt" : job.checkpoint.local_dir;
    for (const std::string& dir : {local, job.checkpoint.shared_dir}) {
      if (!dir.empty() && !std::filesystem::is_directory(dir))
        throw Error(fmt::format(
            "{}: no checkpoints there (the directory does not exist); {}'s checkpoints are in "
            "checkpoint.local / checkpoint.shared, or RUN_DIR/ckpt of its run (--out RUN_DIR)",
            dir, a.target));
    }
    return MakeCheckpointTiers(job.checkpoint, run_dir + "/ckpt");
  }
  if (!std::filesystem::is_directory(a.target)) {
    throw Error(fmt::format("{}: not a job file (.toml), a checkpoint directory or an s3:// URL",
                            a.target));
  }
  std::vector<std::unique_ptr<ckpt::Tier>> t;
  t.push_back(ckpt::MakePosixTier("dir", a.target));
  return t;
}

std::vector<ckpt::Tier*> Raw(const std::vector<std::unique_ptr<ckpt::Tier>>& tiers) {
  std::vector<ckpt::Tier*> out;
  for (const auto& t : tiers) out.push_back(t.get());
  return out;
}

int Ls(const CkptArgs& a) {
  const auto tiers = TiersOf(a);
  TextTable t({"tier", "step", "state", "files", "size", "where"});
  for (const auto& tier : tiers) {
    for (const ckpt::StepListing& s : tier->List()) {
      std::string files = "-", size = "-";
      if (s.committed) {
        try {
          const ckpt::Manifest m = ckpt::ReadManifest(*tier, s.step);
          int64_t bytes = 0;
          for (const auto& [n, f] : m.files) bytes += f.size;
          files = std::to_string(m.files.size());
          size = units::FormatBytes(static_cast<double>(bytes));
        } catch (const std::exception& e) {
          files = "manifest unreadable";
        }
      }
      t.AddRow({tier->name(), std::to_string(s.step), s.committed ? "committed" : "incomplete",
                files, size, tier->Where(s.step, "")});
    }
    // Removed steps' shards that the next save writes over: they hold disk
    // space, and a user who sees it in `du` should find it here.
    if (const ckpt::Tier::Retired r = tier->RetiredFiles(); r.files > 0) {
      t.AddRow({tier->name(), "-", "retired", std::to_string(r.files),
                units::FormatBytes(static_cast<double>(r.bytes)), r.where});
    }
  }
  std::cout << t.RenderText();
  return 0;
}

int Verify(const CkptArgs& a) {
  const auto tiers = TiersOf(a);
  int bad = 0, good = 0;
  for (const auto& tier : tiers) {
    for (const ckpt::StepListing& s : tier->List()) {
      if (!s.committed || (a.step >= 0 && s.step != a.step)) continue;
      const std::vector<std::string> problems = ckpt::VerifyCopy(*tier, s.step);
      if (problems.empty()) {
        ++good;
        std::cout << fmt::format("ok       {} {}\n", tier->name(), tier->Where(s.step, ""));
      }
      for (const std::string& p : problems) {
        ++bad;
        std::cout << fmt::format("CORRUPT  {} {}\n", tier->name(), p);
      }
    }
  }
  std::cout << fmt::format("{} copies verified, {} problems\n", good, bad);
  return bad == 0 ? 0 : 1;
}

// The manifest of the step asked for (or the newest committed), from the
// fastest tier whose manifest reads.
std::pair<ckpt::Manifest, ckpt::Tier*> Pick(const std::vector<std::unique_ptr<ckpt::Tier>>& tiers,
                                            int64_t step, const std::string& target) {
  std::string why;
  std::optional<std::pair<ckpt::Manifest, ckpt::Tier*>> best;
  for (const auto& tier : tiers) {
    for (const ckpt::StepListing& s : tier->List()) {
      if (!s.committed || (step >= 0 && s.step != step)) continue;
      if (best && best->first.counters.step >= s.step) continue;
      try {
        best = std::pair{ckpt::ReadManifest(*tier, s.step), tier.get()};
      } catch (const std::exception& e) {
        why += fmt::format("\n  {}", e.what());
      }
    }
  }
  if (!best) {
    throw Error(fmt::format("{}: no committed checkpoint{}{}", target,
                            step >= 0 ? fmt::format(" at step {}", step) : "", why));
  }
  return *best;
}

std::string Shape(const std::vector<int64_t>& dims) {
  std::string s;
  for (const int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

int Inspect(const CkptArgs& a) {
  const auto tiers = TiersOf(a);
  const auto [m, tier] = Pick(tiers, a.step, a.target);
  std::cout << fmt::format(
      "{}  ({} tier, written by fmstack {})\n"
      "step {}  optimizer step {}  data position {} tokens  seed {}  rng {:016x}\n"
      "layout: {} data-parallel ranks, ZeRO stage {}\nmodel: {}\n\n",
      tier->Where(m.counters.step, ""), tier->name(), m.fmstack_version, m.counters.step,
      m.counters.optimizer_step, m.counters.data_position, m.counters.seed, m.counters.rng,
      m.layout.world, m.layout.zero_stage, m.model.dump());
  TextTable t({"tensor", "dtype", "shape", "pieces", "bytes"});
  int64_t total = 0;
  for (const auto& [name, e] : m.tensors) {
    const int64_t bytes = e.elements() * ckpt::DTypeSize(e.dtype);
    total += bytes;
    t.AddRow({name, ckpt::DTypeName(e.dtype), Shape(e.shape), std::to_string(e.pieces.size()),
              units::FormatBytes(static_cast<double>(bytes))});
  }
  std::cout << t.RenderText();
  TextTable f({"file", "rank", "size", "chunks"});
  for (const auto& [name, e] : m.files) {
    f.AddRow({name, std::to_string(e.rank), units::FormatBytes(static_cast<double>(e.size)),
              fmt::format("{} x {} (xxh3-64)", e.checksums.size(),
                          units::FormatBytes(static_cast<double>(e.chunk_bytes)))});
  }
  std::cout << "\n" << f.RenderText();
  std::cout << fmt::format("\n{} tensors, {} in {} files\n", m.tensors.size(),
                           units::FormatBytes(static_cast<double>(total)), m.files.size());
  return 0;
}

// The model's weights ("model." tensors) in one file: safetensors or
// PyTorch's format, under Hugging Face's GPT-2 names (or ours), read through
// restore's fallback and checksums.
int Export(const CkptArgs& a) {
  if (a.file.empty()) throw Error("ckpt export: --file FILE is required");
  const auto tiers = TiersOf(a);
  const ckpt::Manifest m = Pick(tiers, a.step, a.target).first;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<ckpt::TensorTarget> targets;
  for (const auto& [name, e] : m.tensors) {
    if (!name.starts_with("model.")) continue;
    if (a.names == "hf" && gpt::HfGpt2Tensors(name.substr(6), e.shape).empty())
      throw Error(
          fmt::format("{}: tensor '{}' is not a parameter of fmstack's GPT (a checkpoint "
                      "of another model? `--names fmstack` exports it as saved)",
                      a.target, name));
    buffers.emplace_back(static_cast<size_t>(e.elements() * ckpt::DTypeSize(e.dtype)));
    targets.push_back({name, e.dtype, 0, buffers.back()});
  }
  if (targets.empty()) throw Error(fmt::format("{}: no \"model.\" tensors to export", a.target));
  const std::vector<ckpt::Tier*> raw = Raw(tiers);
  const std::optional<ckpt::RestoreResult> r = ckpt::Restore(
      raw, targets, [](const std::string& line) { std::cerr << line << "\n"; }, m.counters.step);
  if (!r) throw Error(fmt::format("{}: no valid copy of step {}", a.target, m.counters.step));
  std::vector<ckpt::NamedTensor> out;
  std::vector<std::vector<std::byte>> transposed;
  transposed.reserve(targets.size());
  int64_t bytes = 0;
  for (const ckpt::TensorTarget& t : targets) {
    const ckpt::TensorEntry& e = m.tensors.at(t.name);
    const std::string ours = t.name.substr(6);
    if (a.names != "hf") {
      out.push_back({ours, e.dtype, e.shape, t.out});
      continue;
    }
    for (const gpt::HfTensor& h : gpt::HfGpt2Tensors(ours, e.shape)) {
      std::span<const std::byte> data = t.out;
      if (h.transpose) {
        transposed.push_back(
            gpt::Transpose(data, e.shape[0], e.shape[1], ckpt::DTypeSize(e.dtype)));
        data = transposed.back();
      }
      out.push_back({h.name, e.dtype, h.shape, data});
    }
  }
  for (const ckpt::NamedTensor& t : out) bytes += static_cast<int64_t>(t.data.size());
  if (a.format == "torch") {
    ckpt::WriteTorchFile(a.file, out);
  } else {
    std::vector<ckpt::ShardPiece> pieces;
    for (const ckpt::NamedTensor& t : out) {
      int64_t n = 1;
      for (const int64_t d : t.shape) n *= d;
      pieces.push_back({t.name, t.dtype, t.shape, 0, n});
    }
    AtomicFileWriter w(a.file);
    const std::string header = ckpt::SafetensorsHeader(pieces);
    w.Write(header.data(), header.size());
    for (const ckpt::NamedTensor& t : out)
      w.Write(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    w.Commit();
  }
  std::cout << fmt::format(
      "wrote {} ({}, {} names): {} tensors, {} (step {}, read from the {} tier)\n", a.file,
      a.format, a.names, out.size(), units::FormatBytes(static_cast<double>(bytes)), r->step,
      r->tier_name);
  return 0;
}

}  // namespace

std::vector<std::unique_ptr<ckpt::Tier>> MakeCheckpointTiers(const spec::CheckpointSpec& c,
                                                             const std::string& default_local) {
  std::vector<std::unique_ptr<ckpt::Tier>> tiers;
  tiers.push_back(ckpt::MakePosixTier("local", c.local_dir.empty() ? default_local : c.local_dir));
  if (!c.shared_dir.empty()) tiers.push_back(ckpt::MakePosixTier("shared", c.shared_dir));
  if (!c.object_url.empty()) {
    ckpt::S3Config s3 = S3FromUrl(c.object_url, c.object_endpoint, c.object_region);
    s3.request_timeout_seconds = c.object_timeout;
    s3.max_attempts = static_cast<int>(c.object_retries);
    tiers.push_back(ckpt::MakeS3Tier("object", s3));
  }
  return tiers;
}

ckpt::TierOwner CheckpointOwner(const std::string& job_name, const std::string& run_dir) {
  const std::string dir = std::filesystem::absolute(run_dir).lexically_normal().string();
  return {dir, fmt::format("job '{}' (run directory {})", job_name, dir)};
}

Runner AddCkptCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ckpt", "List, verify, inspect and export checkpoints");
  cmd->require_subcommand(1);
  auto args = std::make_shared<CkptArgs>();
  auto common = [&](CLI::App* sub) {
    sub->add_option("target", args->target,
                    "job.toml, a checkpoint directory, or s3://bucket/prefix")
        ->required();
    sub->add_option("--out", args->out, "a job's run directory (default runs/<job>)");
    sub->add_option("--endpoint", args->endpoint, "S3 endpoint for an s3:// target");
    sub->add_option("--step", args->step, "one step (default: every committed / the newest)");
  };
  CLI::App* ls = cmd->add_subcommand("ls", "Every step on every tier, committed or not");
  CLI::App* verify =
      cmd->add_subcommand("verify", "Read every chunk of every committed copy and check it");
  CLI::App* inspect =
      cmd->add_subcommand("inspect", "Counters, layout and tensors of a checkpoint");
  CLI::App* exp = cmd->add_subcommand(
      "export", "The model's weights in one file, loadable by torch and Hugging Face's GPT-2");
  for (CLI::App* sub : {ls, verify, inspect, exp}) common(sub);
  exp->add_option("-o,--file", args->file, "output file (.safetensors, or .pt for torch)")
      ->required();
  exp->add_option("--format", args->format,
                  "safetensors, or torch: torch.load() returns the state dict")
      ->check(OneOf({"safetensors", "torch"}))
      ->default_val("safetensors");
  exp->add_option("--names", args->names,
                  "hf: GPT2LMHeadModel's state_dict names and Conv1D (in, out) weights; "
                  "fmstack: as saved")
      ->check(OneOf({"hf", "fmstack"}))
      ->default_val("hf");
  return [=] {
    if (ls->parsed()) return Ls(*args);
    if (verify->parsed()) return Verify(*args);
    if (inspect->parsed()) return Inspect(*args);
    return Export(*args);
  };
}

}  // namespace fmstack::cli
