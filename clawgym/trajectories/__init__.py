"""clawgym.trajectories: trajectory records, cleaning and the SFT export."""

from clawgym.trajectories.sft import (
    SFTBuildResult,
    SFTCleanConfig,
    build_sft_dataset,
    check_sft_rows,
    contaminated_tasks,
    dataset_stats,
    save_hf_dataset,
    write_sft_parquet,
)

__all__ = [
    "SFTBuildResult", "SFTCleanConfig", "build_sft_dataset", "check_sft_rows", "contaminated_tasks", "dataset_stats",
    "save_hf_dataset", "write_sft_parquet",
]
