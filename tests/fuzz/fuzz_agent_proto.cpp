// Fuzz target: the agent channel protocol (src/proto/messages.h). The input
// is read as a frame (DecodeEnvelope) and, as well as the body of a frame
// that decodes, as a message body by every message decoder; and as the
// binary side of the channel: a tunnel frame (proto/tunnel_mux.h), a
// tunnel target (proto/tunnel_target.h) and an exec stream
// (proto/exec_stream.h). Whatever decodes must survive Encode -> Decode
// unchanged. Seeds: tests/fuzz/corpus/agent_proto.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "proto/exec_stream.h"
#include "proto/messages.h"
#include "proto/tunnel_mux.h"
#include "proto/tunnel_target.h"

namespace {

using namespace gpupool;
using namespace gpupool::proto;

template <typename T>
void RoundTrip(std::string_view body, const char* type, Result<T> (*decode)(std::string_view)) {
  Result<T> m = decode(body);
  if (!m.ok()) return;
  std::string encoded = Encode(*m);
  Result<T> back = decode(encoded);
  FUZZ_CHECK(back.ok(), std::string(type) + ": " + back.status().ToString() + "\n" + encoded);
  FUZZ_CHECK(*back == *m, std::string(type) + " changed in the round trip: " + encoded);
}

void Bodies(std::string_view body) {
  RoundTrip<Hello>(body, "hello", DecodeHello);
  RoundTrip<Heartbeat>(body, "heartbeat", DecodeHeartbeat);
  RoundTrip<TaskReport>(body, "task_status", DecodeTaskReport);
  RoundTrip<LogChunk>(body, "logs", DecodeLogChunk);
  RoundTrip<Welcome>(body, "welcome", DecodeWelcome);
  RoundTrip<StartTask>(body, "start", DecodeStartTask);
  RoundTrip<StopTask>(body, "stop", DecodeStopTask);
  RoundTrip<StageCheckpoint>(body, "stage", DecodeStageCheckpoint);
  RoundTrip<NodeLending>(body, "lending", DecodeLending);
  RoundTrip<NodeEvent>(body, "node_event", DecodeNodeEvent);
  RoundTrip<Leave>(body, "leave", DecodeLeave);
}

// The channel's binary messages and what travels inside tunnel streams.
void Tunnels(std::string_view bytes) {
  if (auto f = DecodeTunnelFrame(bytes); f.ok()) {
    std::string encoded = EncodeTunnelFrame(*f);
    auto back = DecodeTunnelFrame(encoded);
    FUZZ_CHECK(back.ok() && *back == *f, "a tunnel frame changed in the round trip");
  }
  if (auto t = DecodeTunnelTarget(bytes); t.ok()) {
    std::string encoded = EncodeTunnelTarget(*t);
    auto back = DecodeTunnelTarget(encoded);
    FUZZ_CHECK(back.ok(), "tunnel target: " + back.status().ToString() + "\n" + encoded);
    FUZZ_CHECK(*back == *t, "a tunnel target changed in the round trip: " + encoded);
  }
  // An exec stream, fed in two pieces: every frame read re-encodes to the
  // bytes it came from, and an error is final.
  ExecFrameReader reader;
  size_t half = bytes.size() / 2;
  reader.Feed(bytes.substr(0, half));
  std::string reencoded;
  for (int piece = 0; piece < 2; ++piece) {
    if (piece == 1) reader.Feed(bytes.substr(half));
    for (;;) {
      auto f = reader.Next();
      if (!f.ok()) {
        FUZZ_CHECK(!reader.Next().ok(), "an exec stream error did not stick");
        return;
      }
      if (!*f) break;
      reencoded += EncodeExecFrame((*f)->type, (*f)->payload);
    }
  }
  FUZZ_CHECK(bytes.substr(0, reencoded.size()) == reencoded,
             "exec frames did not re-encode to their bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto e = DecodeEnvelope(text); e.ok()) {
    std::string frame = EncodeEnvelope(*e);
    auto back = DecodeEnvelope(frame);
    FUZZ_CHECK(back.ok(), back.status().ToString() + "\n" + frame);
    FUZZ_CHECK(back->version == e->version && back->seq == e->seq && back->ack == e->ack &&
                   back->type == e->type && back->body == e->body,
               "the envelope changed in the round trip: " + frame);
    Bodies(e->body);
  }
  Bodies(text);
  Tunnels(text);
  return 0;
}
