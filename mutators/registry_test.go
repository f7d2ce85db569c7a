package mutators

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// The registry runs exactly the injections contract names, in its order: the
// configuration accepts contract's names in its `mutators` switch, so an
// injection missing from either would be impossible to switch off or a
// switch that turns nothing off.
func TestRegistryIsContractsInjectionNames(t *testing.T) {
	assert.Equal(t, contract.InjectionNames(), Names(),
		"mutators.Injections() and contract.InjectionNames() must list the same injections in the same order")
}

// The registry's order is the marker's, which users and tests read.
func TestRegistryOrderIsTheMarkersOrder(t *testing.T) {
	assert.Equal(t, []string{"prestop", "taskd", "checkpoint-volume", "recover-strategy", "gpu", "restart-rules", "in-process-recovery", "avoid-nodes"}, Names())
	for _, in := range Injections() {
		switch in.Name {
		case "restart-rules", "in-process-recovery":
			assert.NotNil(t, in.Pod, "%s is checked on every pod", in.Name)
			assert.NotNil(t, in.Template, "%s goes into a job's template as far as it can tell", in.Name)
		case "avoid-nodes":
		default:
			assert.NotNil(t, in.Template, "%s runs on templates", in.Name)
		}
	}
}

// The chart schema's enum of config.mutators is the registry's names: an
// injection added to the registry but not to the schema could not be
// switched off with the chart, and a name only in the schema would be
// refused by trainguard when it loads the configuration.
func TestRegistryIsTheChartSchemasMutatorsEnum(t *testing.T) {
	raw, err := os.ReadFile("../charts/trainguard/values.schema.json")
	require.NoError(t, err)
	var schema struct {
		Properties struct {
			Config struct {
				Properties struct {
					Mutators struct {
						PropertyNames struct {
							Enum []string `json:"enum"`
						} `json:"propertyNames"`
					} `json:"mutators"`
				} `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(raw, &schema))
	assert.Equal(t, Names(), schema.Properties.Config.Properties.Mutators.PropertyNames.Enum,
		"charts/trainguard/values.schema.json config.mutators.propertyNames.enum must list mutators.Injections() in order")
}
