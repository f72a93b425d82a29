# tests/controller/sched: the scheduler end to end on kdet-local: fair share by weight, and live
# changes of priority, queue position and resource pool of queued trials.
$(eval $(call kd_test_script,test_ctrl_e2e_fairshare,e2e/controller/fairshare.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_queue,e2e/controller/queue.sh,120,,$(CTRL_E2E_DEPS)))
