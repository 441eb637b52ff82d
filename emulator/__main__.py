"""``python -m emulator --host 127.0.0.1 --port 8765 --limit 1000000 --tokenizer cl100k``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import uvicorn

from emulator.app import create_app
from emulator.config import FAULT_KINDS, ConfigError, EmulatorConfig, FaultConfig, RateLimitConfig
from vocab import TokenizerError


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        faults = FaultConfig(
            rate=args.fault_rate,
            kinds=tuple(args.fault_kinds.split(",")),
            script=tuple(args.fault_script.split(",")) if args.fault_script else (),
            retry_after_seconds=args.retry_after,
            seed=args.seed,
        )
        rate_limits = RateLimitConfig(
            requests_per_minute=args.requests_per_minute,
            input_tokens_per_minute=args.input_tokens_per_minute,
            output_tokens_per_minute=args.output_tokens_per_minute,
            count_cache_reads=args.count_cache_reads,
            second_client_share=args.second_client_share,
        )
        config = EmulatorConfig(
            limit=args.limit,
            tokenizer=args.tokenizer,
            count_scale=args.count_scale,
            max_output_tokens=args.max_output_tokens,
            min_cacheable_tokens=args.min_cacheable_tokens,
            cache_ttl_seconds=args.cache_ttl,
            faults=faults,
            rate_limits=rate_limits,
            latency_seconds=args.latency,
            anxious=args.anxious,
            delegate_group=args.delegate_group,
            api_key=args.api_key,
            stop_at_context_window=args.stop_at_context_window,
        )
        app = create_app(config)
    except (ConfigError, TokenizerError) as exc:
        parser.error(str(exc))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


def _parser() -> argparse.ArgumentParser:
    defaults = EmulatorConfig()
    parser = argparse.ArgumentParser(
        prog="python -m emulator",
        description="A stand-in model server speaking the Anthropic Messages and OpenAI Chat Completions APIs.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--limit", type=int, default=defaults.limit, help="context limit in input tokens")
    parser.add_argument(
        "--tokenizer",
        default=defaults.tokenizer,
        help="cl100k, o200k, or the path of a cl100k_base/o200k_base .tiktoken[.gz] file",
    )
    parser.add_argument(
        "--count-scale",
        type=float,
        default=defaults.count_scale,
        help="input tokens counted per tokenizer token, e.g. 1.3 for a tokenizer that counts 30%% more",
    )
    parser.add_argument(
        "--max-output-tokens", type=int, default=defaults.max_output_tokens, help="the models endpoint's max_tokens"
    )
    parser.add_argument("--min-cacheable-tokens", type=int, default=defaults.min_cacheable_tokens)
    parser.add_argument("--cache-ttl", type=float, default=defaults.cache_ttl_seconds, help="seconds")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every model request")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of model requests that fail")
    parser.add_argument(
        "--fault-kinds", default="429", help=f"comma-separated kinds for --fault-rate, from {','.join(FAULT_KINDS)}"
    )
    parser.add_argument("--fault-script", default="", help="comma-separated faults for the next requests")
    parser.add_argument("--retry-after", type=float, default=1.0, help="retry-after seconds sent with a 429")
    parser.add_argument("--seed", type=int, default=0, help="seed for --fault-rate draws")
    limits = parser.add_argument_group("rate limits, per API key and model class (0: no limit)")
    limits.add_argument("--requests-per-minute", type=int, default=0)
    limits.add_argument("--input-tokens-per-minute", type=int, default=0, help="uncached input tokens")
    limits.add_argument("--output-tokens-per-minute", type=int, default=0)
    limits.add_argument("--count-cache-reads", action="store_true", help="cache reads count as input tokens")
    limits.add_argument(
        "--second-client-share", type=float, default=0.0, help="share of every limit another client takes"
    )
    parser.add_argument("--anxious", action="store_true", help="the agent stops early to save space")
    parser.add_argument("--delegate-group", type=int, default=defaults.delegate_group)
    parser.add_argument(
        "--stop-at-context-window",
        action="store_true",
        help="when input + max_tokens pass the limit, stop with model_context_window_exceeded instead of a 400",
    )
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any key)")
    parser.add_argument("--log-level", default="info")
    return parser


if __name__ == "__main__":
    main()
