#include "store/log_chunk.h"

#include <zstd.h>

namespace gpupool {
namespace {

// zstd's fastest levels: a flood's chunks compress at hundreds of MB/s.
constexpr int kZstdLevel = 1;

void PutVarint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutSigned(int64_t v, std::string& out) {
  // Zigzag: small magnitudes of either sign take few bytes.
  PutVarint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63), out);
}

class PackedReader {
 public:
  explicit PackedReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  bool Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Signed(int64_t& v) {
    uint64_t u = 0;
    if (!Varint(u)) return false;
    v = static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
    return true;
  }
  bool Byte(unsigned char& b) {
    if (pos_ >= data_.size()) return false;
    b = static_cast<unsigned char>(data_[pos_++]);
    return true;
  }
  bool Bytes(std::string& out) {
    uint64_t n = 0;
    if (!Varint(n) || n > data_.size() - pos_) return false;
    out.assign(data_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

constexpr std::string_view kStreams[] = {"stdout", "stderr", "event"};

}  // namespace

void PackLogLine(const LogLine& line, int64_t cursor, PackState& prev, std::string& out) {
  PutSigned(cursor - prev.cursor, out);
  PutSigned(line.offset - prev.offset, out);
  PutSigned(line.ts_ms - prev.ts_ms, out);
  unsigned char stream = 3;
  for (unsigned char i = 0; i < 3; ++i) {
    if (line.stream == kStreams[i]) stream = i;
  }
  out.push_back(static_cast<char>(stream));
  if (stream == 3) {
    PutVarint(line.stream.size(), out);
    out += line.stream;
  }
  PutVarint(line.text.size(), out);
  out += line.text;
  prev = {cursor, line.offset, line.ts_ms};
}

Result<std::vector<LogLine>> UnpackLogLines(std::string_view packed, const std::string& attempt_id,
                                            int32_t rank) {
  std::vector<LogLine> out;
  PackedReader r(packed);
  PackState prev;
  while (!r.done()) {
    LogLine l;
    int64_t dc = 0, doff = 0, dts = 0;
    unsigned char stream = 0;
    bool ok = r.Signed(dc) && r.Signed(doff) && r.Signed(dts) && r.Byte(stream);
    if (ok && stream < 3) {
      l.stream = std::string(kStreams[stream]);
    } else if (ok && stream == 3) {
      ok = r.Bytes(l.stream);
    } else {
      ok = false;
    }
    ok = ok && r.Bytes(l.text);
    if (!ok) {
      return Status::DataLoss("log chunk of attempt " + attempt_id + " rank " +
                              std::to_string(rank) + ": line " + std::to_string(out.size() + 1) +
                              " does not decode");
    }
    l.attempt_id = attempt_id;
    l.rank = rank;
    l.cursor = prev.cursor + dc;
    l.offset = prev.offset + doff;
    l.ts_ms = prev.ts_ms + dts;
    prev = {l.cursor, l.offset, l.ts_ms};
    out.push_back(std::move(l));
  }
  return out;
}

std::string CompressLogChunk(std::string_view packed) {
  std::string out(ZSTD_compressBound(packed.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), packed.data(), packed.size(), kZstdLevel);
  if (ZSTD_isError(n)) return std::string();
  out.resize(n);
  return out;
}

Result<std::string> DecompressLogChunk(std::string_view data, size_t raw_size) {
  std::string out(raw_size, '\0');
  size_t n = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
  if (ZSTD_isError(n) || n != raw_size) {
    return Status::DataLoss(std::string("log chunk does not decompress: ") +
                            (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
  }
  return out;
}

}  // namespace gpupool
