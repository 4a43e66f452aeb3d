#include "comm/store_wire.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace fmstack::comm::wire {

void PutField(std::string& out, const std::string& field) {
  const auto n = static_cast<uint32_t>(field.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(field);
}

bool TakeField(const std::string& in, size_t& pos, std::string& field) {
  if (pos + 4 > in.size()) return false;
  uint32_t n = 0;
  std::memcpy(&n, in.data() + pos, 4);
  if (pos + 4 + n > in.size()) return false;
  field.assign(in, pos + 4, n);
  pos += 4 + n;
  return true;
}

uint32_t PeekLength(const std::string& in) {
  uint32_t n = 0;
  if (in.size() >= 4) std::memcpy(&n, in.data(), 4);
  return n;
}

std::string Frame(const std::string& payload) {
  std::string out;
  PutField(out, payload);
  return out;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::getrandom(out.data() + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw Error(fmt::format("getrandom: {}", std::strerror(errno)));
    done += static_cast<size_t>(got);
  }
  return out;
}

std::string Mac(const std::string& secret, const std::string& role, const std::string& a,
                const std::string& b) {
  const std::string msg = role + a + b;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool SameBytes(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace fmstack::comm::wire
