// The public face of the reference engine (everything under src/engine/): what another module
// includes to load or make a model, generate from it, serve it, tokenize, and pick its kernels.
// Link plumb_scheduler, the top of the engine's libraries (it brings plumb_engine, plumb_tokenizer
// and plumb_cpu_kernels). The headers this one includes carry the contracts; every other header
// under src/engine/ is internal to the engine (docs/architecture.md, "Modules and their public
// headers"), reached from outside only by tests and benchmarks.
//
//  - a model: engine::Model::load (a Hugging Face folder) or Model::dummy (seeded weights of a
//    config), with engine::ModelOptions (threads, dtype, quantization, kernel selection) and
//    engine::load_model_config (engine/model.h, engine/model_config.h);
//  - generation: engine::generate over a Model, one prompt to completion, with SamplingParams and
//    the stopping rule SamplingParams::ends_sequence, model_eos_ids, and the text streams
//    (engine/generate.h, engine/sampling.h);
//  - serving: scheduler::ServingEngine (what the HTTP server talks to), scheduler::LlmEngine and its
//    LlmEngineConfig (requested, then normalize() into the effective settings, device included),
//    scheduler::SyntheticEngine, and the device seam: scheduler::make_runner(Device, model) builds
//    the ModelRunner for a device setting ("cpu", "cuda", "cuda:N")
//    (engine/scheduler/llm_engine.h, serving_engine.h, model_runner.h, synthetic_engine.h);
//  - tokenizer: engine::Tokenizer and the chat template (engine/tokenizer/tokenizer.h,
//    chat_template.h);
//  - kernel selection: engine::KernelSelection, parsed from its JSON and resolved per phase by
//    resolve_kernels; the registry is keyed by (device, op) (engine/cpu/kernels.h).
#pragma once

#include "engine/cpu/kernels.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/sampling.h"
#include "engine/scheduler/llm_engine.h"
#include "engine/scheduler/model_runner.h"
#include "engine/scheduler/serving_engine.h"
#include "engine/scheduler/synthetic_engine.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
