# lib/yaml: YAML <-> JSON with source positions (libyaml, jansson).
$(eval $(call kd_lib,yaml,lib/yaml/yaml.c))
