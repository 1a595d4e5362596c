--- pen's model providers, generated from src/providers/facts.rs; do not edit.
--- Update: PEN_UPDATE_GENERATED=1 cargo test --lib protocol::codegen
--- For each `provider` value: the variable its key is read from (nil: none, or AWS's own
--- credentials) and where its requests go when `base_url` is unset.
return {
  openai = { key_variable = "OPENAI_API_KEY", default_base_url = "https://api.openai.com/v1", title = "OpenAI Chat Completions, or any OpenAI-compatible server (llama.cpp, vLLM, LM Studio, Ollama's /v1)" },
  anthropic = { key_variable = "ANTHROPIC_API_KEY", default_base_url = "https://api.anthropic.com", title = "Anthropic Messages" },
  bedrock = { key_variable = nil, default_base_url = "https://bedrock-runtime.{region}.amazonaws.com", title = "Amazon Bedrock Converse (AWS credentials and region from the environment)" },
  ollama = { key_variable = nil, default_base_url = "http://127.0.0.1:11434", title = "Ollama's native API (sizes the context window of every request)" },
}
