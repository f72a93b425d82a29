# lib/config: experiment configuration (load, merge templates, validate, defaults).
$(eval $(call kd_lib,config,lib/config/config.c lib/config/check.c lib/config/k8smap.c lib/config/task.c))
