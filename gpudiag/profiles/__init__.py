"""Node profiles shipped with gpudiag (TOML; `gpudiag check --profile NAME`)."""
