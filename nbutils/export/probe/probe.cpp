// nbutils-llama-probe MODEL.gguf REQUEST.json OUT_DIR [LORA.gguf]
//
// What llama.cpp itself makes of a GGUF, for 04's runtime check (nbutils/export/llamaruntime.py), with the calls
// llama-cli and llama-server make: the vocabulary's BOS policy and end-of-generation tokens; chats rendered by the
// GGUF's own chat template through llama.cpp's Jinja engine (common_chat_templates_apply, BOS text stripped where
// the model adds BOS, as the server does) and tokenized with special tokens added and parsed; raw texts tokenized
// both ways; greedy generation from a chat that stops at the first end-of-generation token; and the logits of given
// token ids, one float32 row per position, written to OUT_DIR/logits-<i>.f32. The answer is OUT_DIR/result.json.
//
// REQUEST: {"threads": n, "chats": [{"messages": [{"role", "content"}...], "add_generation_prompt": bool,
//            "generate": max_new_tokens (0: none)}], "texts": ["..."], "logits": [[id, ...], ...]}

#include "chat.h"
#include "common.h"
#include "llama.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using json = nlohmann::ordered_json;

static void log_warnings(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) {  // warnings and errors: the caller shows them with a failure
        fputs(text, stderr);
    }
}

static json pieces(const llama_vocab * vocab, const std::vector<llama_token> & ids) {
    json out = json::array();
    for (llama_token id : ids) {
        out.push_back(common_token_to_piece(vocab, id, true));
    }
    return out;
}

static json declared(const llama_model * model, const std::string & key) {
    char buf[512];
    int n = llama_model_meta_val_str(model, key.c_str(), buf, sizeof(buf));
    return n < 0 ? json(nullptr) : json(std::string(buf));
}

static json vocab_facts(const llama_model * model, const llama_vocab * vocab) {
    json eog = json::array();
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (llama_token id = 0; id < n_vocab; ++id) {
        if (llama_vocab_is_eog(vocab, id)) {
            eog.push_back(id);
        }
    }
    json meta = json::object();
    for (const char * key : {"eos_token_id", "eot_token_id", "eom_token_id", "bos_token_id", "add_bos_token"}) {
        meta[key] = declared(model, std::string("tokenizer.ggml.") + key);
    }
    return {{"n_vocab", n_vocab}, {"add_bos", llama_vocab_get_add_bos(vocab)}, {"add_eos", llama_vocab_get_add_eos(vocab)},
            {"bos", llama_vocab_bos(vocab)}, {"eos", llama_vocab_eos(vocab)}, {"eot", llama_vocab_eot(vocab)},
            {"eog", eog}, {"eog_pieces", pieces(vocab, eog.get<std::vector<llama_token>>())}, {"metadata", meta}};
}

static void decode(llama_context * ctx, const std::vector<llama_token> & ids, int pos0, bool all_logits) {
    llama_batch batch = llama_batch_init((int) ids.size(), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
        batch.token[i] = ids[i];
        batch.pos[i] = pos0 + (int) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = all_logits || i + 1 == ids.size();
    }
    batch.n_tokens = (int) ids.size();
    int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) {
        throw std::runtime_error("llama_decode failed with " + std::to_string(rc));
    }
}

// Greedy decoding as llama-cli --temp 0 does it: the largest logit (the first on a tie), until an end-of-generation
// token (kept, as the runtime emits it before stopping) or max_new tokens.
static json generate(llama_context * ctx, const llama_vocab * vocab, const std::vector<llama_token> & prompt, int max_new) {
    llama_memory_clear(llama_get_memory(ctx), true);
    decode(ctx, prompt, 0, false);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> out;
    json margins = json::array();
    bool stopped = false;
    for (int k = 0; k < max_new; ++k) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        int best = 0, second = -1;
        for (int i = 1; i < n_vocab; ++i) {
            if (logits[i] > logits[best]) {
                second = best;
                best = i;
            } else if (second < 0 || logits[i] > logits[second]) {
                second = i;
            }
        }
        out.push_back(best);
        margins.push_back(logits[best] - logits[second]);
        if (llama_vocab_is_eog(vocab, best)) {
            stopped = true;
            break;
        }
        decode(ctx, {best}, (int) (prompt.size() + out.size() - 1), false);
    }
    return {{"ids", out}, {"pieces", pieces(vocab, out)}, {"margins", margins}, {"stopped", stopped}};
}

static json logits_file(llama_context * ctx, const llama_vocab * vocab, const std::vector<llama_token> & ids,
                        const std::string & path) {
    llama_memory_clear(llama_get_memory(ctx), true);
    decode(ctx, ids, 0, true);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::ofstream f(path, std::ios::binary);
    for (size_t i = 0; i < ids.size(); ++i) {
        f.write(reinterpret_cast<const char *>(llama_get_logits_ith(ctx, (int) i)), sizeof(float) * n_vocab);
    }
    if (!f) {
        throw std::runtime_error("could not write " + path);
    }
    return {{"file", path}, {"rows", ids.size()}, {"n_vocab", n_vocab}};
}

static json render(const common_chat_templates * tmpls, const llama_vocab * vocab, const json & chat) {
    common_chat_templates_inputs inputs;
    for (const auto & m : chat.at("messages")) {
        common_chat_msg msg;
        msg.role = m.at("role").get<std::string>();
        msg.content = m.at("content").get<std::string>();
        inputs.messages.push_back(msg);
    }
    inputs.use_jinja = true;  // llama-cli's and llama-server's default
    inputs.add_generation_prompt = chat.value("add_generation_prompt", true);
    inputs.reasoning_format = common_params().reasoning_format;
    try {
        std::string text = common_chat_templates_apply(tmpls, inputs).prompt;
        std::vector<llama_token> ids = common_tokenize(vocab, text, true, true);
        return {{"text", text}, {"ids", ids}, {"pieces", pieces(vocab, ids)}};
    } catch (const std::exception & e) {  // a template llama.cpp cannot render: the caller names it
        return {{"error", e.what()}};
    }
}

// Room for the longest sequence: a chat's prompt with its generated tokens, or a row of logits.
static size_t context_size(const json & req, const std::vector<json> & chats) {
    size_t prompt = 16, gen = 0;
    for (const auto & c : chats) {
        prompt = std::max(prompt, c.contains("ids") ? c["ids"].size() : 0);
    }
    for (const auto & chat : req.value("chats", json::array())) {
        gen = std::max(gen, (size_t) std::max(0, chat.value("generate", 0)));
    }
    for (const auto & ids : req.value("logits", json::array())) {
        prompt = std::max(prompt, ids.size());
    }
    return prompt + gen + 1;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf REQUEST.json OUT_DIR [LORA.gguf]\n", argv[0]);
        return 2;
    }
    const std::string out_dir = argv[3];
    try {
        json req = json::parse(std::ifstream(argv[2]));
        llama_log_set(log_warnings, nullptr);
        llama_backend_init();
        llama_model_params mparams = llama_model_default_params();
        mparams.n_gpu_layers = 0;
        llama_model * model = llama_model_load_from_file(argv[1], mparams);
        if (model == nullptr) {
            throw std::runtime_error(std::string("llama.cpp could not load ") + argv[1]);
        }
        const llama_vocab * vocab = llama_model_get_vocab(model);
        json result = {{"vocab", vocab_facts(model, vocab)}};

        auto tmpls = common_chat_templates_init(model, "");
        std::vector<json> chats;
        for (const auto & chat : req.value("chats", json::array())) {
            chats.push_back(render(tmpls.get(), vocab, chat));
        }
        json texts = json::array();
        for (const auto & t : req.value("texts", json::array())) {
            std::string text = t.get<std::string>();
            std::vector<llama_token> added = common_tokenize(vocab, text, true, true);
            std::vector<llama_token> plain = common_tokenize(vocab, text, false, true);
            texts.push_back({{"ids", added}, {"plain", plain}, {"pieces", pieces(vocab, added)}});
        }
        result["texts"] = texts;

        llama_context_params cparams = llama_context_default_params();
        cparams.n_ctx = (uint32_t) context_size(req, chats);
        cparams.n_batch = cparams.n_ctx;
        cparams.n_ubatch = std::min<uint32_t>(cparams.n_ctx, 512);
        int threads = req.value("threads", (int) std::max(1u, std::thread::hardware_concurrency()));
        cparams.n_threads = cparams.n_threads_batch = threads;
        cparams.no_perf = true;
        llama_context * ctx = llama_init_from_model(model, cparams);
        if (ctx == nullptr) {
            throw std::runtime_error("llama.cpp could not create a context");
        }
        llama_adapter_lora * lora = nullptr;
        if (argc > 4) {
            lora = llama_adapter_lora_init(model, argv[4]);
            float scale = 1.0f;
            if (lora == nullptr || llama_set_adapters_lora(ctx, &lora, 1, &scale) != 0) {
                throw std::runtime_error(std::string("llama.cpp could not apply the LoRA ") + argv[4]);
            }
        }
        const auto & asked = req.value("chats", json::array());
        for (size_t i = 0; i < chats.size(); ++i) {
            int max_new = asked[i].value("generate", 0);
            if (max_new > 0 && chats[i].contains("ids")) {
                chats[i]["generated"] = generate(ctx, vocab, chats[i]["ids"].get<std::vector<llama_token>>(), max_new);
            }
        }
        result["chats"] = chats;
        json files = json::array();
        int k = 0;
        for (const auto & ids : req.value("logits", json::array())) {
            std::string path = out_dir + "/logits-" + std::to_string(k++) + ".f32";
            files.push_back(logits_file(ctx, vocab, ids.get<std::vector<llama_token>>(), path));
        }
        result["logits"] = files;
        std::ofstream(out_dir + "/result.json") << result.dump(1, ' ', false, json::error_handler_t::replace);
        if (lora != nullptr) {
            llama_adapter_lora_free(lora);
        }
        llama_free(ctx);
        llama_model_free(model);
        llama_backend_free();
    } catch (const std::exception & e) {
        fprintf(stderr, "nbutils-llama-probe: %s\n", e.what());
        return 1;
    }
    return 0;
}
