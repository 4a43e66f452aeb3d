#include "ckpt/torch_file.h"

#include <fmt/format.h>
#include <zlib.h>

#include <limits>

#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

const char* StorageClass(DType t) {
  switch (t) {
    case DType::kF32:
      return "FloatStorage";
    case DType::kBF16:
      return "BFloat16Storage";
    case DType::kF16:
      return "HalfStorage";
    case DType::kI64:
      return "LongStorage";
    case DType::kI32:
      return "IntStorage";
    case DType::kU8:
      return "ByteStorage";
  }
  return "FloatStorage";
}

// The few pickle opcodes a state dict needs.
class Pickler {
 public:
  void Proto() { out_ += "\x80\x02"; }
  void Global(const char* module, const char* name) {
    out_ += fmt::format("c{}\n{}\n", module, name);
  }
  void Mark() { out_ += '('; }
  void Tuple() { out_ += 't'; }
  void EmptyTuple() { out_ += ')'; }
  void Reduce() { out_ += 'R'; }
  void SetItems() { out_ += 'u'; }
  void BinPersId() { out_ += 'Q'; }
  void False() { out_ += '\x89'; }
  void Stop() { out_ += '.'; }
  void Str(const std::string& s) {
    out_ += 'X';
    Le(static_cast<uint64_t>(s.size()), 4);
    out_ += s;
  }
  void Int(int64_t v) {
    if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
      out_ += 'J';
      Le(static_cast<uint64_t>(static_cast<int32_t>(v)), 4);
    } else {
      out_ += "\x8a\x08";  // LONG1: 8 bytes, two's complement
      Le(static_cast<uint64_t>(v), 8);
    }
  }
  void EmptyOrderedDict() {
    Global("collections", "OrderedDict");
    EmptyTuple();
    Reduce();
  }
  std::string& str() { return out_; }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

// An uncompressed zip, the way PyTorch's reader expects it.
class ZipWriter {
 public:
  explicit ZipWriter(AtomicFileWriter& w) : w_(w) {}
  void Add(const std::string& name, std::span<const std::byte> data) {
    const uint64_t offset = pos_;
    // Records start on 64-byte boundaries (torch.save's layout): the local
    // header's extra field pads up to there.
    const uint64_t bare = offset + 30 + name.size() + 4;
    const uint16_t pad = static_cast<uint16_t>((64 - bare % 64) % 64);
    const uint32_t crc = static_cast<uint32_t>(
        ::crc32_z(0, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    if (offset + 30 + name.size() + 4 + pad + data.size() > 0xffffffffull)
      throw Error("the file would pass 4 GiB, which needs zip64 (not written by fmstack)");
    std::string h;
    Le(h, 0x04034b50, 4);
    Le(h, 20, 2);
    Le(h, 0, 2);     // flags
    Le(h, 0, 2);     // stored
    Le(h, 0, 2);     // time
    Le(h, 0x21, 2);  // 1980-01-01
    Le(h, crc, 4);
    Le(h, data.size(), 4);
    Le(h, data.size(), 4);
    Le(h, name.size(), 2);
    Le(h, 4u + pad, 2);
    h += name;
    Le(h, 0x4246, 2);  // "FB": PyTorch's padding field
    Le(h, pad, 2);
    h.append(pad, 'Z');
    Put(h);
    w_.Write(reinterpret_cast<const char*>(data.data()), data.size());
    pos_ += data.size();
    std::string c;
    Le(c, 0x02014b50, 4);
    Le(c, 20, 2);
    Le(c, 20, 2);
    Le(c, 0, 2);
    Le(c, 0, 2);
    Le(c, 0, 2);
    Le(c, 0x21, 2);
    Le(c, crc, 4);
    Le(c, data.size(), 4);
    Le(c, data.size(), 4);
    Le(c, name.size(), 2);
    Le(c, 0, 2);  // extra
    Le(c, 0, 2);  // comment
    Le(c, 0, 2);  // disk
    Le(c, 0, 2);  // internal attributes
    Le(c, 0, 4);  // external attributes
    Le(c, offset, 4);
    c += name;
    central_ += c;
    ++entries_;
  }
  void Finish() {
    const uint64_t at = pos_;
    Put(central_);
    std::string e;
    Le(e, 0x06054b50, 4);
    Le(e, 0, 2);
    Le(e, 0, 2);
    Le(e, entries_, 2);
    Le(e, entries_, 2);
    Le(e, central_.size(), 4);
    Le(e, at, 4);
    Le(e, 0, 2);
    Put(e);
  }

 private:
  static void Le(std::string& s, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void Put(const std::string& s) {
    w_.Write(s.data(), s.size());
    pos_ += s.size();
  }
  AtomicFileWriter& w_;
  uint64_t pos_ = 0;
  std::string central_;
  uint64_t entries_ = 0;
};

int64_t Elements(const NamedTensor& t) {
  int64_t n = 1;
  for (const int64_t d : t.shape) n *= d;
  return n;
}

}  // namespace

std::string TorchStateDictPickle(const std::vector<NamedTensor>& tensors) {
  Pickler p;
  p.Proto();
  p.EmptyOrderedDict();
  p.Mark();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& t = tensors[i];
    p.Str(t.name);
    // torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
    // requires_grad, backward_hooks)
    p.Global("torch._utils", "_rebuild_tensor_v2");
    p.Mark();
    p.Mark();
    p.Str("storage");
    p.Global("torch", StorageClass(t.dtype));
    p.Str(std::to_string(i));
    p.Str("cpu");
    p.Int(Elements(t));
    p.Tuple();
    p.BinPersId();
    p.Int(0);
    p.Mark();
    for (const int64_t d : t.shape) p.Int(d);
    p.Tuple();
    p.Mark();
    int64_t stride = 1;
    std::vector<int64_t> strides(t.shape.size());
    for (size_t d = t.shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= t.shape[d];
    }
    for (const int64_t s : strides) p.Int(s);
    p.Tuple();
    p.False();
    p.EmptyOrderedDict();
    p.Tuple();
    p.Reduce();
  }
  p.SetItems();
  p.Stop();
  return std::move(p.str());
}

void WriteTorchFile(const std::string& path, const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors) {
    if (static_cast<int64_t>(t.data.size()) != Elements(t) * DTypeSize(t.dtype))
      throw Error(fmt::format("{}: tensor '{}' has {} bytes, its shape needs {}", path, t.name,
                              t.data.size(), Elements(t) * DTypeSize(t.dtype)));
  }
  AtomicFileWriter w(path);
  try {
    ZipWriter zip(w);
    const std::string pickle = TorchStateDictPickle(tensors);
    auto bytes = [](const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); };
    const std::string archive = "archive/";
    zip.Add(archive + "data.pkl", bytes(pickle));
    for (size_t i = 0; i < tensors.size(); ++i)
      zip.Add(archive + "data/" + std::to_string(i), tensors[i].data);
    const std::string version = "3\n", order = "little";
    zip.Add(archive + "version", bytes(version));
    zip.Add(archive + "byteorder", bytes(order));
    zip.Finish();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  w.Commit();
}

}  // namespace fmstack::ckpt
