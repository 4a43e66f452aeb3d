// `fmstack data prepare [--corpus FILE] [--out DIR] [--vocab N]`
// `fmstack data pipeline JOB.toml`: the corpus pipeline (data/pipeline.h)
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "data/pipeline.h"
#include "train/corpus.h"
#include "util/error.h"
#include "util/strict_table.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

struct DataArgs {
  std::string corpus = "kjv";
  train::PrepareOptions options{.out_dir = "data/kjv"};
};

std::string ReadCorpus(const std::string& corpus) {
  if (corpus == "kjv") return train::ReadKjvCorpus();
  return ReadTextFile(corpus);
}

int RunPrepare(const DataArgs& args) {
  const std::string text = ReadCorpus(args.corpus);
  std::cerr << fmt::format("corpus: {} ({})\n", args.corpus,
                           units::FormatBytes(static_cast<double>(text.size())));
  const train::PrepareReport r =
      train::PrepareData(text, args.options, [](const std::string& stage, int64_t d, int64_t t) {
        // On a terminal one line counts up; in a log only the last one lands.
        if (::isatty(2) == 1) {
          std::cerr << fmt::format("\r{}: {}/{} merges", stage, d, t) << (d == t ? "\n" : "")
                    << std::flush;
        } else if (d == t) {
          std::cerr << fmt::format("{}: {} merges learned\n", stage, d);
        }
      });
  TextTable table({"", "train", "held out"});
  table.AddRow({"bytes", units::FormatCount(static_cast<double>(r.train_bytes)),
                units::FormatCount(static_cast<double>(r.held_out_bytes))});
  table.AddRow({"tokens", units::FormatCount(static_cast<double>(r.train_tokens)),
                units::FormatCount(static_cast<double>(r.held_out_tokens))});
  table.AddRow({"bytes/token",
                fmt::format("{:.2f}", static_cast<double>(r.train_bytes) /
                                          static_cast<double>(r.train_tokens)),
                fmt::format("{:.2f}", static_cast<double>(r.held_out_bytes) /
                                          static_cast<double>(r.held_out_tokens))});
  std::cout << table.RenderText();
  std::cout << fmt::format(
      "vocab {}; unigram entropy {:.3f} nats/token (a model must beat this loss)\n"
      "wrote {}/{{tokenizer.bpe,train.bin,val.bin}} in {:.1f} s\n",
      r.vocab, r.unigram_entropy, args.options.out_dir, r.seconds);
  return 0;
}

struct PipelineArgs {
  std::string job;
  std::string worker;  // "PHASE:RANK:WORKERS" in a worker process
};

std::string Share(int64_t part, int64_t whole) {
  return whole > 0 ? fmt::format("{:.1f}%",
                                 100.0 * static_cast<double>(part) / static_cast<double>(whole))
                   : "-";
}

void PrintPipelineReport(const nlohmann::json& r, const std::string& out) {
  TextTable table({"stage", "docs in", "docs out", "kept", "bytes out", "removed (top reasons)"});
  for (const nlohmann::json& s : r.at("stages")) {
    std::vector<std::pair<int64_t, std::string>> why;
    for (const auto& [reason, n] : s.at("removed").items())
      why.emplace_back(n.get<int64_t>(), reason);
    std::sort(why.rbegin(), why.rend());
    std::string reasons;
    for (size_t i = 0; i < why.size() && i < 3; ++i)
      reasons += fmt::format("{}{} {}", i ? ", " : "", why[i].second, why[i].first);
    const auto in = s.at("docs_in").get<int64_t>(), kept = s.at("docs_out").get<int64_t>();
    const auto bytes = s.at("bytes_out").get<int64_t>();
    table.AddRow({s.at("stage").get<std::string>(), units::FormatCount(static_cast<double>(in)),
                  units::FormatCount(static_cast<double>(kept)), Share(kept, in),
                  bytes < 0 ? "-" : units::FormatBytes(static_cast<double>(bytes)), reasons});
  }
  std::cout << table.RenderText();
  const nlohmann::json& k = r.at("kept");
  std::cout << fmt::format("kept {} documents ({}) in {}/shard-*.jsonl; report: {}/report.json\n",
                           units::FormatCount(k.at("docs").get<double>()),
                           units::FormatBytes(k.at("bytes").get<double>()), out, out);
  if (r.contains("tokenize")) {
    const nlohmann::json& t = r.at("tokenize");
    std::cout << fmt::format("tokenized: {} training and {} held-out tokens, vocab {}, in {}\n",
                             units::FormatCount(t.at("train_tokens").get<double>()),
                             units::FormatCount(t.at("held_out_tokens").get<double>()),
                             t.at("vocab").get<int64_t>(), t.at("dir").get<std::string>());
  }
}

int RunPipelineCommand(const PipelineArgs& args) {
  const data::PipelineSpec spec = data::LoadPipelineSpec(args.job);
  if (!args.worker.empty()) {
    char phase = 0;
    int rank = -1, workers = 0;
    if (std::sscanf(args.worker.c_str(), "%c:%d:%d", &phase, &rank, &workers) != 3 ||
        std::string_view("abd").find(phase) == std::string_view::npos || rank < 0 || workers < 1 ||
        rank >= workers)
      throw Error(fmt::format("--worker \"{}\": expected PHASE:RANK:WORKERS, PHASE one of a, b, d",
                              args.worker));
    data::RunWorker(spec, phase, rank, workers);
    return 0;
  }
  std::cerr << fmt::format("{}: {} input shard(s), {} worker(s), {} stage(s); work in {}/work\n",
                           spec.name, spec.inputs.size(), spec.workers, spec.stages.size(),
                           spec.out);
  const ProgressLine line;
  const char* names[] = {"a: per-document stages", "b: dedup keys", "", "d: output shards"};
  data::PipelineOptions o;
  o.self = std::filesystem::read_symlink("/proc/self/exe").string();
  o.on_note = [&](const std::string& note) { line.Note(note); };
  o.on_progress = [&](const data::PhaseProgress& p) {
    const double rate = p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds : 0;
    const double eta =
        p.done > 0 ? p.seconds * static_cast<double>(p.total - p.done) / static_cast<double>(p.done)
                   : 0;
    std::string text = fmt::format("phase {}: {}/{}", names[p.phase - 'a'], p.done, p.total);
    if (p.phase == 'a' && p.docs > 0)
      text += fmt::format(" | {} docs/s | {}",
                          units::FormatCount(static_cast<double>(p.docs) / p.seconds),
                          units::FormatBandwidth(rate));
    if (p.done > 0 && p.done < p.total) text += fmt::format(" | ETA {}", units::FormatSeconds(eta));
    line.Show(p.done, p.total, text);
  };
  const nlohmann::json report = data::RunPipeline(spec, o);
  line.Note("");
  PrintPipelineReport(report, spec.out);
  return 0;
}

}  // namespace

Runner AddDataCommand(CLI::App& app) {
  auto args = std::make_shared<DataArgs>();
  CLI::App* data = app.add_subcommand(
      "data", "prepare training data: tokenize a text, or build a corpus from web pages");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "train a byte-level BPE tokenizer and write token shards with a 1% held-out split");
  prepare->add_option("--corpus", args->corpus,
                      "text file, or \"kjv\": the King James Bible (Debian bible-kjv)");
  prepare->add_option("--out", args->options.out_dir, "output directory");
  prepare->add_option("--vocab", args->options.vocab, "vocabulary size, 256..65536")
      ->check(Between(256, 65536));
  prepare
      ->add_option("--held-out-every", args->options.held_out_every, "every Nth line is held out")
      ->check(Between(2, 1000000));
  auto pipe = std::make_shared<PipelineArgs>();
  CLI::App* pipeline = data->add_subcommand(
      "pipeline",
      "build a training corpus from web pages: language, extraction, quality rules, exact and "
      "MinHash dedup, tokenization ([data.pipeline] in the job file); resumes where it stopped");
  pipeline->add_option("job", pipe->job, "job file with a [data.pipeline] table")->required();
  pipeline->add_option("--worker", pipe->worker, "internal: run one worker's share of a phase")
      ->group("");
  return [args, pipe, pipeline] {
    if (pipeline->parsed()) return RunPipelineCommand(*pipe);
    return RunPrepare(*args);
  };
}

}  // namespace fmstack::cli
