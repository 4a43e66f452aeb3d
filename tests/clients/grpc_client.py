"""Python gRPC (Debian python3-grpcio) against fmstack serve's HTTP/2
bidirectional stream: a conversation in two turns, a cancel, a refused
message. The message classes come from `protoc --python_out` of
src/serve/proto/stream.proto (into PB_DIR); the call is grpc's generic
stream_stream, so no grpc code generator is needed.
Usage: python3 grpc_client.py HOST:PORT PB_DIR"""
import queue
import sys
import threading

import grpc

sys.path.insert(0, sys.argv[2])
import stream_pb2 as pb  # noqa: E402


class Session:
    def __init__(self, channel):
        self.requests = queue.Queue()
        call = channel.stream_stream("/fmstack.serve.v1.Generation/Stream",
                                     request_serializer=pb.ClientMessage.SerializeToString,
                                     response_deserializer=pb.ServerMessage.FromString)
        self.responses = call(iter(self.requests.get, None), timeout=120)

    def send(self, **kind):
        self.requests.put(pb.ClientMessage(**kind))

    def until_done(self, cancel_after=None):
        text, tokens = "", 0
        for m in self.responses:
            which = m.WhichOneof("kind")
            if which == "tokens":
                text += m.tokens.text
                tokens += len(m.tokens.ids)
                if cancel_after is not None and tokens >= cancel_after:
                    self.send(cancel=pb.Cancel())
                    cancel_after = None
            elif which == "done":
                return text, m.done
            else:
                return text, m.error
        raise AssertionError("the stream ended without a Done")

    def close(self):
        self.requests.put(None)


channel = grpc.insecure_channel(sys.argv[1])
s = Session(channel)
s.send(append=pb.Append(text="In the beginning God created the heaven and the earth. And the "
                             "earth was without form, and void; and darkness was upon the deep."))
s.send(generate=pb.Generate(max_tokens=10, temperature=0))
text, done = s.until_done()
assert done.finish_reason == "length" and done.completion_tokens == 10, done
print(f"turn 1: {text!r}")
s.send(append=pb.Append(text=" And"))
s.send(generate=pb.Generate(max_tokens=5, temperature=0))
text2, done2 = s.until_done()
assert done2.prompt_tokens > done.prompt_tokens + 10 and done2.cached_tokens >= 16, done2
print(f"turn 2: {text2!r} (prompt {done2.prompt_tokens}, cached {done2.cached_tokens})")
s.send(generate=pb.Generate(max_tokens=80, temperature=0.8, seed=2))
_, done3 = s.until_done(cancel_after=1)
assert done3.finish_reason == "abort" and done3.completion_tokens < 80, done3
print(f"cancel: stopped after {done3.completion_tokens} tokens")
s.send(generate=pb.Generate(max_tokens=5, temperature=-1))
_, err = s.until_done()
assert err.param == "temperature", err
s.send(generate=pb.Generate(max_tokens=2, temperature=0))
_, done4 = s.until_done()
assert done4.finish_reason == "length", done4
s.close()
print("grpc client: ok")
