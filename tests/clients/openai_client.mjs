// The official OpenAI client (npm `openai`) against `fmstack serve`:
// a completion, a streamed completion, a cancelled stream, a refused
// request. Usage: node openai_client.mjs BASE_URL [API_KEY]
import OpenAI from "openai";
import assert from "node:assert/strict";

const [baseURL, apiKey = "none"] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
const model = models.data[0].id;
console.log(`models: ${models.data.map((m) => m.id).join(", ")}`);

const plain = await client.completions.create({
  model, prompt: "In the beginning", max_tokens: 12, temperature: 0, logprobs: 2,
});
assert.equal(plain.object, "text_completion");
assert.equal(plain.choices[0].finish_reason, "length");
assert.equal(plain.usage.completion_tokens, 12);
assert.equal(plain.choices[0].logprobs.token_logprobs.length, 12);
console.log(`completion: ${JSON.stringify(plain.choices[0].text)} (${plain.usage.prompt_tokens} + ${plain.usage.completion_tokens} tokens)`);

let streamed = "";
let chunks = 0;
let finish = null;
const stream = await client.completions.create({
  model, prompt: "In the beginning", max_tokens: 12, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length === 0) continue;
  streamed += chunk.choices[0].text;
  chunks += 1;
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
assert.equal(streamed, plain.choices[0].text, "streamed text equals the plain completion's");
assert.equal(finish, "length");
assert.equal(usage.completion_tokens, 12);
console.log(`stream: ${chunks} chunks, same text`);

// Cancel: abort the stream after its first token.
const controller = new AbortController();
const long = await client.completions.create(
  { model, prompt: "And God said", max_tokens: 200, temperature: 0.8, seed: 3, stream: true },
  { signal: controller.signal });
let got = 0;
try {
  for await (const chunk of long) {
    got += chunk.choices.length;
    if (got >= 1) controller.abort();
  }
} catch (e) {
  assert.ok(e.name === "APIUserAbortError" || e.name === "AbortError", `abort raised ${e.name}`);
}
console.log(`cancel: aborted after ${got} chunk(s)`);

// A bad request: the client raises a BadRequestError that names the field.
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 1, temperature: -1 });
  assert.fail("temperature -1 was accepted");
} catch (e) {
  assert.equal(e.status, 400);
  assert.equal(e.param, "temperature");
  console.log(`refused: ${e.status} ${e.message}`);
}
try {
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
  assert.fail("an unknown model was accepted");
} catch (e) {
  assert.equal(e.status, 404);
  assert.equal(e.code, "model_not_found");
}
console.log("openai client: ok");
