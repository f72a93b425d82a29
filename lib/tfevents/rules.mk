# lib/tfevents: TensorBoard event files (TFRecord framing, Event protocol buffers) and their place
# under a checkpoint storage.
$(eval $(call kd_lib,tfevents,$(wildcard lib/tfevents/*.c)))
