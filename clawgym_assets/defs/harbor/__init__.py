"""Harbor: accepted tasks as Harbor dataset folders, one per split."""
