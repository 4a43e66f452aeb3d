// train: turning a corpus into token shards — what `fmstack data prepare` does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fmstack::train {

// The King James Bible, one verse per line without its reference, read from
// the Debian package bible-kjv (`bible`); throws Error when it is missing.
std::string ReadKjvCorpus();

struct SplitText {
  std::string train, held_out;
};
// Every `every`-th line (1-based: lines every, 2 every, ...) goes to held_out:
// a held-out set spread over the whole corpus.
SplitText SplitHeldOut(const std::string& text, int64_t every);

struct PrepareOptions {
  std::string out_dir;
  int64_t vocab = 4096;
  int64_t held_out_every = 100;  // 1% held out
};

struct PrepareReport {
  int64_t train_bytes = 0, held_out_bytes = 0;
  int64_t train_tokens = 0, held_out_tokens = 0;
  int64_t vocab = 0;
  double unigram_entropy = 0;  // nats per token of the training tokens: the loss to beat
  double seconds = 0;
};

// Trains the tokenizer on the training split and writes out_dir/{tokenizer.bpe,
// train.bin, val.bin}. progress(stage, done, total) reports long stages.
PrepareReport PrepareData(
    const std::string& corpus, const PrepareOptions& options,
    const std::function<void(const std::string&, int64_t, int64_t)>& progress);

// Entropy in nats of the token frequency distribution.
double UnigramEntropy(const std::vector<uint16_t>& tokens, int64_t vocab);

}  // namespace fmstack::train
