# tests/images: the image recipes (images/), without building an image:
# linter, Containerfile/files/base.conf consistency, slim.py and archive.py.
# noasan: nothing here is built with the sanitizers.
$(eval $(call kd_test_script,test_images,tests/images/test_images.py,60,noasan,$(sort $(IMAGES_BUILD_FILES))))
# kdet-postgresql's entrypoint against this machine's PostgreSQL 15.
$(eval $(call kd_test_script,test_pg_entrypoint,tests/images/pg_entrypoint.sh,90,noasan))
