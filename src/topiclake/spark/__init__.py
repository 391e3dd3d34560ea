"""topiclake.spark."""
