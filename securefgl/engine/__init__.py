"""securefgl.engine."""
