# tests/controller: kdet-controller unit tests and the end-to-end suite on kdet-local.
$(O)/obj/tests/controller/%.o: KD_CFLAGS += -iquote controller -Icontroller
$(eval $(call kd_test,test_ctrl_sched,tests/controller/test_ctrl_sched.c,ctrl core,,30))
$(eval $(call kd_test,test_ctrl_capacity,tests/controller/test_ctrl_capacity.c,ctrl core,-ljansson,30))
$(eval $(call kd_test,test_ctrl_podspec,tests/controller/test_ctrl_podspec.c tests/support/golden.c,ctrl config yaml hparams core,-ljansson -lyaml -lm,30))
$(eval $(call kd_test,test_ctrl_defaults,tests/controller/test_ctrl_defaults.c,ctrl core,-ljansson,30))
$(eval $(call kd_test,test_ctrl_handoff,tests/controller/test_ctrl_handoff.c,ctrl core,-ljansson -lpthread,30))
# The controller's rows in its store, on a private PostgreSQL (tests/support/pg.c).
$(O)/obj/tests/controller/test_ctrl_wire_store.o: KD_CFLAGS += -Itests
$(eval $(call kd_test,test_ctrl_wire_store,tests/controller/test_ctrl_wire_store.c tests/controller/store/fx.c tests/support/pg.c,ctrl api http store metrics tfevents storage searcher hparams config k8s yaml core,$(CTRL_LDLIBS) -lpthread,120))
$(eval $(call kd_test,test_ctrl_events,tests/controller/test_ctrl_events.c,ctrl k8s yaml core,-ljansson -lyaml -lcurl -lcrypto -lm -lpthread,30))
$(eval $(call kd_test,test_ctrl_gcview,tests/controller/test_ctrl_gcview.c,ctrl core,,30))
$(eval $(call kd_test,test_ctrl_states,tests/controller/test_ctrl_states.c,$(CTRL_KD_LIBS),$(CTRL_LDLIBS),30))
$(eval $(call kd_test,test_ctrl_statecm,tests/controller/test_ctrl_statecm.c,$(CTRL_KD_LIBS),$(CTRL_LDLIBS) -lz,30))
# End-to-end scenarios on a private kdet-local (e2e/controller/*.sh); CTRL_E2E_DEPS is set in the Makefile.
$(eval $(call kd_test_script,test_ctrl_e2e_basic,e2e/controller/basic.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_capacity,e2e/controller/capacity.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_cpuslots,e2e/controller/cpuslots.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_fields,e2e/controller/fields.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_otherpods,e2e/controller/otherpods.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_lifecycle,e2e/controller/lifecycle.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_restarts,e2e/controller/restarts.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_logs,e2e/controller/logs.sh,150,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_preempt,e2e/controller/preempt.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_kill,e2e/controller/kill.sh,300,slow,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_manifests,tests/controller/manifests.sh,30,noasan,))
$(eval $(call kd_test_script,test_ctrl_e2e_leader,e2e/controller/leader.sh,150,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_apirestart,e2e/controller/apirestart.sh,150,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_wire,e2e/controller/wire.sh,120,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_volcano,e2e/controller/volcano.sh,180,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_fmnist,e2e/controller/fmnist.sh,240,,$(CTRL_E2E_DEPS) $(O)/bin/fashion-mnist-c))
$(eval $(call kd_test,test_ctrl_gang,tests/controller/test_ctrl_gang.c tests/support/golden.c,ctrl config yaml hparams k8s core,-ljansson -lyaml -lcurl -lcrypto -lm,30))
$(eval $(call kd_test_script,test_ctrl_e2e_multinode,e2e/controller/multinode.sh,180,,$(CTRL_E2E_DEPS) $(O)/bin/fashion-mnist-c))
$(eval $(call kd_test,test_ctrl_taskstate,tests/controller/test_ctrl_taskstate.c,ctrl core,-ljansson -lcurl,30))
$(eval $(call kd_test_script,test_ctrl_e2e_tasks,e2e/controller/tasks.sh,240,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_notebooks,e2e/controller/notebooks.sh,240,,$(CTRL_E2E_DEPS)))
$(eval $(call kd_test_script,test_ctrl_e2e_shells,e2e/controller/shells.sh,240,,$(CTRL_E2E_DEPS)))
# Tasks' services on kdet-local, whose kubelet runs pods as processes of this machine: Jupyter
# (and a kernel, driven over its WebSocket by e2e/controller/nbclient.py) and sshd with ssh.
DEB_PACKAGES += jupyter-server python3-ipykernel python3-websocket openssh-server openssh-client
