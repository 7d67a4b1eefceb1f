"""The lake: where every domain reads and writes its tables (LakeResource)."""
