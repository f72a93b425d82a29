# lib/openapi: OpenAPI v3 structural-schema validation of custom resources.
$(eval $(call kd_lib,openapi,$(wildcard lib/openapi/*.c)))
