"""``python -m search``: the Hydra-configured multi-objective architecture search.

Examples::

    python -m search                                    # default CPU-sized study
    python -m search hardware=gb200 space=moe n_trials=50 sampler=nsga2
    python -m search experiment=dense_1b_b200_fp8_vs_nvfp4
    python -m search --cfg job                          # print the composed config
    python -m search --help                             # groups, options, recipes and keys
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from search.app import main_entry
from search.cli_help import register_help_resolver, scalar_for_list, unknown_key
from search.config import register_configs
from search.paths import register_resolvers, unknown_group_option
from search.redact import redact_console, redact_log_records

register_configs()
register_resolvers()
register_help_resolver()  # ${search_help:...} of conf/config.yaml's hydra.help (`--help`)
redact_log_records()  # no password of a storage URL in any log line, Hydra's included
redact_console()  # ... nor in anything printed (Hydra's --cfg job prints the composed config itself)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    code = main_entry(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    # before Hydra, whose report of an unknown option is a dozen lines of search path, of an
    # unknown key a hint to write +key=value (which the schema then refuses), and of a bare value for a list
    # field a type error
    problem = unknown_key(sys.argv[1:]) or unknown_group_option(sys.argv[1:]) or scalar_for_list(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
