"""What each RunConfig field means, in one line: the Train page's help texts and the command line's."""

from __future__ import annotations

from gaccum_core.config import MODELS
from gaccum_core.presets import GPT_PRESETS, preset_words

FIELD_HELP = {
    "model": "model to train: " + ", ".join(MODELS) + ", timm:NAME (any timm image model, untrained), "
             "MODULE:FUNCTION / FILE.py:FUNCTION (your factory, called with input_shape=(C, H, W), num_classes=N), "
             "or hf:DIR (a Hugging Face causal language model saved in DIR with its tokenizer; never downloaded)",
    "dataset": "data set: digits (bundled, no download), mnist, fashionmnist, cifar10 (from data_dir), fake, "
               "imagefolder (your images in data_dir, one sub-folder per class), MODULE:FUNCTION / "
               "FILE.py:FUNCTION (your function returning (train, test) datasets of (image tensor, int label)); "
               "text for gpt and hf:DIR: pydoc (Python's documentation topics, bundled), text (text_file), tokens "
               "(nanoGPT's data_dir/train.bin and val.bin of token ids) or hf-dataset (a folder datasets' "
               "save_to_disk wrote, or of .parquet files, in data_dir; its text_field)",
    "micro_batch_size": "samples per forward/backward pass (b)",
    "accum_steps": "micro-batches accumulated per optimizer step (k); effective batch = b*k",
    "reduction": "loss reduction: mean (exact: each micro-batch's summed loss over the window's samples, or "
                 "target tokens for text), sum, or mean_per_micro_batch (the textbook loop: each micro-batch's "
                 "mean loss divided by k; NOT exact when micro-batches hold different sample or token counts)",
    "amp": "mixed precision: off, fp16 (autocast + GradScaler) or bf16 (autocast, no scaler)",
    "init_scale": "GradScaler's initial loss scale (fp16 only)",
    "growth_interval": "clean steps before the GradScaler doubles the scale (fp16 only)",
    "grad_clip": "clip the gradient norm to this value after unscaling (0 = off)",
    "clear_cache": "gc.collect() + torch.cuda.empty_cache(): off, after each optimizer step, or after each micro-batch",
    "compile": "torch.compile mode: off, default, reduce-overhead, max-autotune",
    "optimizer": "sgd (with momentum), adam or adamw",
    "lr": "base learning rate",
    "momentum": "SGD momentum (ignored by adam/adamw)",
    "weight_decay": "weight decay",
    "lr_schedule": "constant or cosine (after warmup), advanced once per optimizer step",
    "warmup_steps": "optimizer steps of linear warmup",
    "epochs": "passes over the training set",
    "max_steps": "stop after this many optimizer steps (0 = no limit)",
    "seed": "seed for the initial weights, the sample order and what training draws (dropout; each rank its own)",
    "device": "auto, cpu, cuda or cuda:N",
    "data_dir": "where mnist, fashionmnist and cifar10 are read from; for imagefolder, the folder of class "
                "folders (or of train/ and val/ each holding them); for tokens, the folder of train.bin (and "
                "val.bin); for hf-dataset, the folder datasets' save_to_disk wrote, or of .parquet files",
    "download": "download mnist/fashionmnist/cifar10 into data_dir when missing",
    "image_size": "resize images to this size for the model (0 = the data set's own size; fake: generated size)",
    "fake_samples": "training samples of the fake data set (its test split is a fifth of that)",
    "fake_classes": "classes of the fake data set",
    "eval_every": "evaluate on the test split every N optimizer steps (0 = at the end of each epoch)",
    "nproc": "data-parallel processes per machine (DDP through torchrun, one GPU each on CUDA); "
             "effective batch = nnodes*nproc*b*k",
    "checkpoint_every": "write checkpoint.pt every N optimizer steps, besides on Stop and at the end "
                        "(0 = only then); a killed run resumes from the last one",
    "nnodes": "machines in a data-parallel job (the command line's --node-rank and --rdzv-endpoint join them)",
    "text_file": "what the text data set reads: a UTF-8 text file split on blank lines into documents, or .jsonl, "
                 "one JSON object a line whose text_field is a document; or a folder or glob of such files (shards, "
                 "read in sorted order). Tokenised once into the token cache (cache_dir), of any size",
    "text_field": "the field of each .jsonl line that holds its document's text",
    "no_dropout": "turn the model's dropout off (every dropout layer's p, and an hf: model's dropout settings, "
                  "set to 0): accumulated and big-batch steps then compute the same function",
    "text_file_max_mb": "the most text read into memory at once, in MB: a larger document (a paragraph or a "
                        ".jsonl line) is refused; the corpus itself may be of any size",
    "packing": "off: each document cut into sequences of max_seq_len, its last one padded (micro-batches hold "
               "different numbers of target tokens); on: documents joined with an end-of-text token and cut into "
               "full sequences (nanoGPT), so every micro-batch holds the same number. A tokens data set is packed "
               "by nature",
    "token_dtype": "the width of a tokens data set's ids in train.bin and val.bin: uint16 (as nanoGPT writes them, "
                   "for a vocabulary of at most 65,536 ids) or uint32",
    "cache_dir": "where text is kept tokenised (one flat file of token ids per corpus and tokenizer, reused by "
                 "later runs, other ranks and the planner); empty: GACCUM_CACHE_DIR, else token-cache beside the "
                 "runs directory (--runs-dir, else GACCUM_RUNS_DIR, else ./runs)",
    "activation_checkpointing": "keep only each block's input and recompute its activations during backward "
                                "(torch.utils.checkpoint, non-reentrant, dropout masks preserved): off, selective "
                                "(every ac_every-th block) or full (every block); less activation memory for more "
                                "compute, the lever beside accumulation",
    "ac_every": "with selective activation checkpointing: checkpoint every N-th block (1 = every block, as full)",
    "weights_file": "start a timm:NAME or torchvision model from your weights: a .safetensors, .pth, .pt or .bin "
                    "file of its state dict (empty: untrained, drawn from the seed). Every key and shape must fit; "
                    "a classifier of other classes is left freshly initialised for the data set's",
    "eval_batches": "batches of the test split each evaluation reads: the same ones every time, so evaluations "
                    "compare (0 = the whole split)",
    "max_seq_len": "longest sequence (tokens) of the text data sets: documents are cut into chunks of this length "
                   "(at most the positions the model embeds)",
    "gpt_preset": "size of the gpt model: " + ", ".join(preset_words(name) for name in GPT_PRESETS)
                  + "; tiny suits the CPU, gpt2 is GPT-2 small's shape",
    "sync_every_micro_batch": "all-reduce gradients after every micro-batch instead of once per window "
                              "(turns DDP's no_sync off, to see what it saves)",
    "sharding": "ddp: every process holds the whole model, its gradients and optimizer state; fsdp: FSDP2 "
                "shards them over the processes (each block, then the root), gathering weights per block as it "
                "computes (needs nnodes*nproc > 1)",
    "fsdp_sync": "with fsdp: reduce-scatter gradients after every micro-batch (each rank keeps 1/N of the "
                 "gradient) or only after the window's last (k times fewer collectives, but each rank keeps the "
                 "whole fp32 gradient between micro-batches)",
    "tensorboard": "on: the run also writes TensorBoard event files into its folder's tb/ as it trains (every "
                   "metrics.csv and eval.csv column as a scalar, its settings and final figures as hparams; "
                   "`tensorboard --logdir` on the runs directory shows them); off: none",
    "fsdp_reshard_after_backward": "with fsdp: on frees each block's gathered weights after its backward; off "
                                   "keeps them between a window's micro-batches (fewer all-gathers, more memory)",
}
