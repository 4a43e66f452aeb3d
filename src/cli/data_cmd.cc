// `fmstack data prepare [--corpus FILE] [--out DIR] [--vocab N]`
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
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

}  // namespace

Runner AddDataCommand(CLI::App& app) {
  auto args = std::make_shared<DataArgs>();
  CLI::App* data = app.add_subcommand("data", "prepare training data");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "train a byte-level BPE tokenizer and write token shards with a 1% held-out split");
  prepare->add_option("--corpus", args->corpus,
                      "text file, or \"kjv\": the King James Bible (Debian bible-kjv)");
  prepare->add_option("--out", args->options.out_dir, "output directory");
  prepare->add_option("--vocab", args->options.vocab, "vocabulary size, 256..65536")
      ->check(CLI::Range(256, 65536));
  prepare
      ->add_option("--held-out-every", args->options.held_out_every, "every Nth line is held out")
      ->check(CLI::Range(2, 1000000));
  return [args] { return RunPrepare(*args); };
}

}  // namespace fmstack::cli
