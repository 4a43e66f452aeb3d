// comm (private): the store's wire format and handshake, shared by the
// server and the client. Every message is a u32 length + payload. A request
// is an op byte and fields (u32 length + bytes each); a reply is a status
// byte and one field.
#pragma once

#include <cstdint>
#include <string>

namespace fmstack::comm::wire {

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4 };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// The client's first message: kHello, a nonce, the time (16 hex digits of
// Unix milliseconds) and its MAC; the server's answer: kAdmitted and its
// MAC, or kRefused and why.
inline constexpr char kHello[] = "FMSTORE2";
inline constexpr char kAdmitted[] = "OK";
inline constexpr char kRefused[] = "NO";
inline constexpr size_t kTimeChars = 16;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

void PutField(std::string& out, const std::string& field);
// Takes one field at `pos`; false when `in` does not hold a whole one yet.
bool TakeField(const std::string& in, size_t& pos, std::string& field);
// The u32 length a framed buffer starts with (0 when fewer than 4 bytes).
uint32_t PeekLength(const std::string& in);
std::string Frame(const std::string& payload);

std::string RandomBytes(size_t n);
// HMAC-SHA256(secret, role | a | b): who proves it ("client"/"server") is
// part of the message, so one side's proof never serves as the other's.
std::string Mac(const std::string& secret, const std::string& role, const std::string& a,
                const std::string& b);
bool SameBytes(const std::string& a, const std::string& b);  // constant time

}  // namespace fmstack::comm::wire
